"""A blocking wrapper of the client, for plain scripts:

    from parley.client import sync

    with sync.connect_stdio() as p:
        s = p.start("demo", "hello")
        print(s.answer)
        s.send("/ask Ship it? | yes | no", on_question=lambda q: "yes")

The async client runs on an event loop in a thread of its own (an anyio blocking portal); each
method waits for its call there. Callbacks are plain functions and run in a worker thread, so one
may block (e.g. on input()) without stopping the connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from parley.client import client as aio
from parley.client.handlers import ApprovalVerdict, QuestionVerdict
from parley.client.models import (
    AgentList,
    Closed,
    Deleted,
    DraftItem,
    Interrupt,
    Outcome,
    PendingItem,
    Plan,
    SessionPage,
    SessionState,
    SessionSummary,
)
from parley.client.session import Session

A = TypeVar("A")
R = TypeVar("R")

SyncOnApproval = Callable[[Interrupt], ApprovalVerdict]
SyncOnQuestion = Callable[[Interrupt], QuestionVerdict]
SyncOnEvent = Callable[[Any], None]


def _in_thread(fn: Callable[[A], R] | None) -> Callable[[A], Awaitable[R]] | None:
    """A blocking callback made into one the event loop can await without blocking."""
    if fn is None:
        return None
    target = fn

    async def call(value: A) -> R:
        return await anyio.to_thread.run_sync(target, value)

    return call


def _callbacks(
    on_approval: SyncOnApproval | None, on_question: SyncOnQuestion | None, on_event: SyncOnEvent | None
) -> dict[str, Any]:
    return {
        "on_approval": _in_thread(on_approval),
        "on_question": _in_thread(on_question),
        "on_event": _in_thread(on_event),
    }


class SyncSession:
    """A Session whose methods block until their call is done."""

    def __init__(self, portal: BlockingPortal, session: Session) -> None:
        self._portal = portal
        self.aio = session

    @property
    def id(self) -> str:
        return self.aio.id

    @property
    def last(self) -> Outcome | None:
        return self.aio.last

    @property
    def answer(self) -> str | None:
        return self.aio.answer

    @property
    def result(self) -> Any:
        return self.aio.result

    @property
    def pending(self) -> list[Interrupt]:
        return self.aio.pending

    @property
    def plan(self) -> Plan | None:
        return self.aio.plan

    def send(
        self,
        message: str,
        *,
        steer: bool = False,
        attachments: Sequence[Mapping[str, Any]] | None = None,
        on_approval: SyncOnApproval | None = None,
        on_question: SyncOnQuestion | None = None,
        on_event: SyncOnEvent | None = None,
        wait: bool = True,
        plan: bool = False,
    ) -> Outcome:
        callbacks = _callbacks(on_approval, on_question, on_event)
        return self._portal.call(
            lambda: self.aio.send(
                message, steer=steer, attachments=attachments, wait=wait, plan=plan, **callbacks
            )
        )

    def execute_plan(
        self,
        revision: int,
        *,
        wait: bool = True,
        on_approval: SyncOnApproval | None = None,
        on_question: SyncOnQuestion | None = None,
        on_event: SyncOnEvent | None = None,
    ) -> Outcome:
        callbacks = _callbacks(on_approval, on_question, on_event)
        return self._portal.call(lambda: self.aio.execute_plan(revision, wait=wait, **callbacks))

    def discard_plan(self) -> SessionSummary:
        return self._portal.call(self.aio.discard_plan)

    def approve(self, *interrupts: Interrupt | str, reason: str | None = None) -> Outcome:
        return self._portal.call(lambda: self.aio.approve(*interrupts, reason=reason))

    def reject(self, *interrupts: Interrupt | str, reason: str | None = None) -> Outcome:
        return self._portal.call(lambda: self.aio.reject(*interrupts, reason=reason))

    def answer_question(self, question: Interrupt | str, text: str) -> Outcome:
        return self._portal.call(lambda: self.aio.answer_question(question, text))

    def decline(self, question: Interrupt | str) -> Outcome:
        return self._portal.call(lambda: self.aio.decline(question))

    def wait(self) -> Outcome:
        return self._portal.call(self.aio.wait)

    def cancel(self) -> Outcome:
        return self._portal.call(self.aio.cancel)

    def close(self) -> Closed:
        return self._portal.call(self.aio.close)

    def delete(self) -> Deleted:
        return self._portal.call(self.aio.delete)

    def update(self, *, title: str | None = None, tags: list[str] | None = None) -> SessionSummary:
        return self._portal.call(lambda: self.aio.update(title=title, tags=tags))

    def state(self) -> SessionState:
        return self._portal.call(self.aio.state)

    def attachment(self, sha256: str) -> bytes:
        return self._portal.call(self.aio.attachment, sha256)


class SyncParley:
    """A Parley client whose methods block until their call is done."""

    def __init__(self, portal: BlockingPortal, parley: aio.Parley) -> None:
        self._portal = portal
        self.aio = parley

    def agents(self) -> AgentList:
        return self._portal.call(self.aio.agents)

    def start(
        self,
        agent: str,
        message: str | None = None,
        *,
        inputs: dict[str, Any] | None = None,
        attachments: Sequence[Mapping[str, Any]] | None = None,
        on_approval: SyncOnApproval | None = None,
        on_question: SyncOnQuestion | None = None,
        on_event: SyncOnEvent | None = None,
        plan: bool | None = None,
    ) -> SyncSession:
        callbacks = _callbacks(on_approval, on_question, on_event)
        session = self._portal.call(
            lambda: self.aio.start(
                agent, message, inputs=inputs, attachments=attachments, plan=plan, **callbacks
            )
        )
        return SyncSession(self._portal, session)

    def session(self, session_id: str) -> SyncSession:
        return SyncSession(self._portal, self.aio.session(session_id))

    def resume(self, session_id: str) -> SyncSession:
        return SyncSession(self._portal, self._portal.call(self.aio.resume, session_id))

    def list_sessions(self, *, limit: int = 20) -> SessionPage:
        return self._portal.call(lambda: self.aio.list_sessions(limit=limit))

    def pending(self, limit: int = 50) -> list[PendingItem]:
        return self._portal.call(self.aio.pending, limit)

    def drafts(self, limit: int = 50) -> list[DraftItem]:
        return self._portal.call(self.aio.drafts, limit)

    def replay(self, session_id: str, agent: str | None = None) -> SessionSummary:
        return self._portal.call(self.aio.replay, session_id, agent)

    def fork(
        self, session_id: str, at_turn: int, *, agent_version: str | None = None, title: str | None = None
    ) -> SyncSession:
        forked = self._portal.call(
            lambda: self.aio.fork(session_id, at_turn, agent_version=agent_version, title=title)
        )
        return SyncSession(self._portal, forked)


def _sync_options(options: aio.Options | None, callbacks: dict[str, Any]) -> aio.Options:
    given = {k: v for k, v in _callbacks(**callbacks).items() if v is not None}
    return replace(options or aio.Options(), **given)


@contextmanager
def _blocking(connect: AbstractAsyncContextManager[aio.Parley]) -> Iterator[SyncParley]:
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(connect) as parley:
        yield SyncParley(portal, parley)


@contextmanager
def connect_stdio(
    config: str | Path | None = None,
    db: str | Path | None = None,
    *,
    log_level: str = "WARNING",
    server_log: TextIO | None = None,
    options: aio.Options | None = None,
    on_approval: SyncOnApproval | None = None,
    on_question: SyncOnQuestion | None = None,
    on_event: SyncOnEvent | None = None,
) -> Iterator[SyncParley]:
    """parley.client.connect_stdio, blocking; the callbacks are plain functions."""
    merged = _sync_options(
        options, {"on_approval": on_approval, "on_question": on_question, "on_event": on_event}
    )
    with _blocking(
        aio.connect_stdio(config, db, log_level=log_level, server_log=server_log, options=merged)
    ) as parley:
        yield parley


@contextmanager
def connect_http(
    url: str,
    token: str | None = None,
    *,
    options: aio.Options | None = None,
    on_approval: SyncOnApproval | None = None,
    on_question: SyncOnQuestion | None = None,
    on_event: SyncOnEvent | None = None,
) -> Iterator[SyncParley]:
    """parley.client.connect_http, blocking; the callbacks are plain functions."""
    merged = _sync_options(
        options, {"on_approval": on_approval, "on_question": on_question, "on_event": on_event}
    )
    with _blocking(aio.connect_http(url, token, options=merged)) as parley:
        yield parley
