"""The commands that bring a session messages: start_session (a new session, with its first
message), send_message (queued behind the running turn, a steer, or a queued message promoted
to one) and delete_queued_message. Each commits first and then waits, bounded, for the turn
that takes the caller's message."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from parley.config import AgentConfig, effective_limits
from parley.core import transitions
from parley.core.changes import Admit
from parley.core.ids import (
    QueuedMessageId,
    SessionId,
    is_queued_message_id,
    new_session_id,
)
from parley.core.records import AttachmentBlob, QueuedMessageRecord, SessionRecord, TurnMode
from parley.core.states import ENDED_SESSION
from parley.errors import (
    AgentRemoved,
    InvalidArgument,
    RateLimited,
    RequestError,
    SessionClosed,
    SessionLimitReached,
    SessionNotFound,
)
from parley.runtime import audit
from parley.runtime.access import Principal, may_use
from parley.runtime.fair_use import FairUse
from parley.runtime.model_titles import ModelTitles, wants_model_title
from parley.runtime.progress import ProgressFn
from parley.runtime.service.checks import Checks, render_first_message
from parley.runtime.service.outcomes import TurnOutcome
from parley.runtime.service.parts import Parts
from parley.runtime.service.requests import SendRequest, StartRequest, Waiting
from parley.runtime.service.waits import Waits
from parley.runtime.session_access import Person
from parley.runtime.session_labels import proposed_title
from parley.runtime.session_log import about
from parley.runtime.tracing import current_trace_context

logger = logging.getLogger("parley.runtime.service")

# What a message carried, as stored: its text and its attachments' references.
Sent = tuple[str | None, list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class _Start:
    """A start_session request once checked."""

    agent: AgentConfig
    kind: str
    settings: dict[str, Any] | None
    text: str | None  # the first message as stored (with the inputs), if any
    refs: list[dict[str, Any]]
    blobs: tuple[AttachmentBlob, ...]
    wait_s: float
    mode: TurnMode | None = None


@dataclass(frozen=True, slots=True)
class _Send:
    """A send_message request once its session and settings are checked."""

    session: SessionRecord
    agent: AgentConfig | None
    settings: dict[str, Any] | None
    refs: list[dict[str, Any]]
    blobs: tuple[AttachmentBlob, ...]
    person: Person | None


class MessageCommands:
    def __init__(
        self, parts: Parts, checks: Checks, waits: Waits, fair_use: FairUse, titles: ModelTitles | None
    ) -> None:
        self._parts = parts
        self._checks = checks
        self._waits = waits
        self._fair_use = fair_use
        self._titles = titles

    async def start_session(self, caller: Principal, request: StartRequest, waiting: Waiting) -> TurnOutcome:
        p = self._parts
        start = await self._checked_start(caller, request, waiting)
        agent, text = start.agent, start.text
        if request.client_message_id is not None:
            existing = await p.store.find_started(caller.id, request.client_message_id)
            if existing is not None:
                return await self._retry_of_start(existing, start, waiting.on_progress)
        now = p.clock()
        session_id = new_session_id()
        record = SessionRecord.new(
            session_id,
            agent=agent.name,
            owner=caller.id,
            kind=start.kind,
            now=now,
            inputs=request.inputs,
            start_client_message_id=request.client_message_id,
            settings=start.settings,
            title=None if self._model_titled(agent, request.message) else proposed_title(request.message),
        )
        queued = _first_queued(session_id, start, request.client_message_id, now)
        if queued is None and start.mode == "planning":
            # Started empty to plan: the first message plans, as it would have here.
            record = replace(record, planning=True)
        claim = self._fair_use.claim(caller, new_session=True, message=text is not None, now=now)
        admit = (
            None if claim is None else Admit(claim.scope, lambda usage: claim.admit(usage, starts_turn=True))
        )
        act = audit.MESSAGE if queued else audit.START
        entry = p.audit.entry(caller, act, session_id=session_id, target=queued.id if queued else None)
        # Watched from before the commit: the wait reads nothing until something changes.
        with p.signals.watching(session_id) as changes:
            try:
                created = await p.store.create_session(
                    transitions.starting(record, queued), queued, now, admit=admit, audit=entry
                )
            except RateLimited as exc:
                action = audit.MESSAGE if text else audit.START
                await p.audit.refused(caller, action, None, None, str(exc), reason="limit")
                raise
            if not created:
                # A concurrent retry with the same client_message_id won the race.
                existing = await p.store.find_started(caller.id, request.client_message_id or "")
                if existing is None:
                    raise InvalidArgument("client_message_id", "was just used by another call; retry")
                return await self._retry_of_start(existing, start, waiting.on_progress)
            logger.info(
                "session %s started with agent %s (%s)",
                session_id,
                agent.name,
                start.kind,
                extra=about(record),
            )
            if queued is None:
                return TurnOutcome(session_id=session_id, turn_id=None, status="idle", session_status="idle")
            if record.title is None:
                await self._title(session_id, agent, request.message)
            p.signals.work_available(session_id, but=changes)
            person = p.access.person(caller, record, waiting.ask_human)
            return await self._waits.wait_for_message(
                session_id, queued.id, start.wait_s, waiting.on_progress, person, queued_under=changes
            )

    async def _checked_start(self, caller: Principal, request: StartRequest, waiting: Waiting) -> _Start:
        checks = self._checks
        agent = checks.agent(caller, request.agent)
        settings = checks.settings(request.settings, agent)
        if request.message is not None:
            checks.message(request.message)
        refs, blobs = checks.attachments(request.attachments)
        wait_s = checks.wait_s(waiting.seconds)
        checks.client_message_id(request.client_message_id)
        kind = checks.kind(agent, request.kind)
        checks.inputs(agent, request.inputs)
        await checks.enabled_tools(settings, agent, kind, caller.id)
        text = render_first_message(request.message, request.inputs)
        checks.first_message(text, refs)
        plans = checks.plan(agent, request.plan)
        return _Start(agent, kind, settings, text, refs, blobs, wait_s, "planning" if plans else None)

    async def _retry_of_start(
        self, existing: SessionRecord, start: _Start, on_progress: ProgressFn | None
    ) -> TurnOutcome:
        first = await self._parts.store.first_message(existing.id)
        sent = (first.text, first.attachments or []) if first else (None, [])
        if existing.agent != start.agent.name or sent != (start.text, start.refs):
            raise InvalidArgument(
                "client_message_id",
                f"was already used to start session {existing.id} with a different agent or message; "
                "use a new client_message_id for a new session",
            )
        if first is None:
            return TurnOutcome(
                session_id=existing.id, turn_id=None, status="idle", session_status=existing.status
            )
        return await self._waits.wait_for_message(existing.id, first.id, start.wait_s, on_progress)

    async def send_message(self, caller: Principal, request: SendRequest, waiting: Waiting) -> TurnOutcome:
        checks = self._checks
        send = await self._checked_send(caller, request, waiting)
        if request.queued_message_id is not None:
            if send.refs:
                raise InvalidArgument(
                    "attachments", "leave them out when promoting a queued message; it keeps its own"
                )
            return await self._promote(caller, send.session, request, waiting, send.person)
        if request.message is None:
            raise InvalidArgument(
                "message", "is required (unless you promote a queued message with queued_message_id)"
            )
        checks.message(request.message)
        wait_s = checks.wait_s(waiting.seconds)
        checks.client_message_id(request.client_message_id)
        if request.plan and send.agent is not None:
            checks.plan(send.agent, True)
        # A repeated client_message_id is found by the queueing's own transaction ("duplicate"),
        # before any fair use is counted: the first send reads nothing more for it.
        return await self._enqueue(caller, request, send, wait_s, waiting.on_progress)

    async def _checked_send(self, caller: Principal, request: SendRequest, waiting: Waiting) -> _Send:
        p = self._parts
        act = audit.STEER if request.steer else audit.MESSAGE
        targets = [request.queued_message_id or ""]
        # A new message: the session as this process last read it. What is checked here never
        # changes, and the queueing's transaction reads the rest (its status, settings and turns,
        # or that it is gone) under the session's lock.
        remembered = request.queued_message_id is None
        session = await p.access.visible(caller, request.session_id, act, targets, remembered=remembered)
        agent = p.agents.get(session.agent)
        if agent is None:
            session = await p.access.visible(caller, request.session_id, act, targets)  # its status now
        if agent is None and session.status not in ENDED_SESSION:
            raise AgentRemoved(session.id, session.agent)
        if agent is not None and not may_use(caller, agent):
            # The agent's users: changed since the session started; its history stays readable.
            raise InvalidArgument(
                "session_id", f"agent '{agent.name}' is no longer available to {caller.id}; nothing was sent"
            )
        settings = self._checks.settings(request.settings, agent)
        await self._checks.enabled_tools(settings, agent, session.kind, session.owner)
        person = p.access.person(caller, session, waiting.ask_human)
        refs, blobs = self._checks.attachments(request.attachments)
        return _Send(session, agent, settings, refs, blobs, person)

    async def _enqueue(
        self,
        caller: Principal,
        request: SendRequest,
        send: _Send,
        wait_s: float,
        on_progress: ProgressFn | None,
    ) -> TurnOutcome:
        """Queue the message (behind the running turn, or as a steer) and wait for its turn."""
        p = self._parts
        session, agent, message = send.session, send.agent, request.message or ""
        act = audit.STEER if request.steer else audit.MESSAGE

        def max_turns(stored: SessionRecord) -> int:
            """The turns the session may take, from its settings as stored and the message's."""
            overrides = {**stored.settings, **(send.settings or {})}
            return effective_limits(agent.limits, overrides).max_turns if agent else stored.turn_count

        now = p.clock()
        queued = QueuedMessageRecord.new(
            session.id,
            message,
            now=now,
            client_message_id=request.client_message_id,
            steer=request.steer,
            settings=send.settings,
            attachments=send.refs or None,
            blobs=send.blobs,
            trace_context=current_trace_context(),
            mode="planning" if request.plan else None,
        )
        entry = p.audit.entry(caller, act, session_id=session.id, target=queued.id)
        # Counted with the message; one to a busy session queues behind (or steers) its turn, so
        # it starts no turn more.
        claim = self._fair_use.claim(caller, new_session=False, message=True, now=now)
        # Watched from before the commit: the wait reads nothing until something changes.
        with p.signals.watching(session.id) as changes:
            try:
                outcome, stored = await p.steps.enqueue_message(
                    session.id, session.owner, queued, max_turns, now, entry, claim
                )
            except RateLimited as exc:
                await p.audit.refused(caller, act, session.id, None, str(exc), reason="limit")
                raise
            if stored is None:
                # Gone since this process read it: refused as any unknown session is.
                p.access.forget(session.id)
                await p.access.refuse_unseen(caller, session.id, act)
                raise SessionNotFound(session.id)
            p.access.remember(stored)
            if outcome == "queued":
                if stored.title is None:
                    await self._title(session.id, agent, message)
                p.signals.work_available(session.id, but=changes)
                return await self._waits.wait_for_message(
                    session.id, queued.id, wait_s, on_progress, send.person, queued_under=changes
                )
        if outcome == "duplicate":
            sent = await p.store.find_sent(session.id, request.client_message_id or "")
            if sent is None:
                raise InvalidArgument("client_message_id", "was just used by another call; retry")
            return await self._retry_of_send(sent, (message, send.refs), wait_s, on_progress)
        refusal = await self._refusal(stored, outcome, max_turns(stored))
        await p.audit.refused(caller, act, session.id, None, str(refusal), reason=outcome)
        raise refusal

    async def _refusal(self, session: SessionRecord, outcome: str, max_turns: int) -> RequestError:
        """Why a message was not queued (the queueing transaction's `outcome`)."""
        if outcome == "closed":
            latest = await self._parts.store.get_session(session.id) or session
            return SessionClosed(session.id, ended_reason(latest))
        if outcome == "turn_limit":
            return SessionLimitReached(
                session.id,
                f"it has used or queued all {max_turns} turns its agent allows, so it takes no more messages.",
            )
        return SessionNotFound(session.id)

    async def _promote(
        self,
        caller: Principal,
        session: SessionRecord,
        request: SendRequest,
        waiting: Waiting,
        person: Person | None,
    ) -> TurnOutcome:
        p = self._parts
        queued_message_id = request.queued_message_id or ""
        if not request.steer:
            raise InvalidArgument(
                "queued_message_id", "goes with steer=true: it promotes a queued message to a steer"
            )
        if request.message is not None:
            raise InvalidArgument(
                "message", "leave it out when promoting a queued message; its text is already stored"
            )
        wait_s = self._checks.wait_s(waiting.seconds)
        if not is_queued_message_id(queued_message_id):
            raise InvalidArgument(
                "queued_message_id", "is not a queued message id (qm_ followed by 32 hex digits)"
            )
        record = await p.steps.promote_to_steer(
            session.id, session.owner, QueuedMessageId(queued_message_id), p.clock()
        )
        if record is None:
            raise InvalidArgument(
                "queued_message_id", f"no message {queued_message_id} in session {session.id}"
            )
        if record.status == "dropped":
            raise InvalidArgument("queued_message_id", f"{queued_message_id} was deleted; send it again")
        await p.audit.record(caller, audit.STEER, session_id=session.id, target=record.id)
        p.signals.request_cancel(session.id)
        p.signals.work_available(session.id)
        return await self._waits.wait_for_message(session.id, record.id, wait_s, waiting.on_progress, person)

    async def delete_queued_message(self, caller: Principal, session_id: str, queued_message_id: str) -> str:
        p = self._parts
        session = await p.access.visible(caller, session_id, audit.DELETE_QUEUED, [queued_message_id])
        if not is_queued_message_id(queued_message_id):
            raise InvalidArgument(
                "queued_message_id", "is not a queued message id (qm_ followed by 32 hex digits)"
            )
        record = await p.steps.delete_queued(
            session.id, session.owner, QueuedMessageId(queued_message_id), p.clock()
        )
        if record is None:
            raise InvalidArgument(
                "queued_message_id", f"no message {queued_message_id} in session {session.id}"
            )
        if record.status == "consumed":
            raise InvalidArgument(
                "queued_message_id",
                f"{queued_message_id} was already taken into turn {record.turn_id}; cancel_turn stops it",
            )
        p.signals.notify(session.id)
        if record.status == "dropped":
            return "already deleted"
        await p.audit.record(caller, audit.DELETE_QUEUED, session_id=session.id, target=record.id)
        return "deleted"

    async def _retry_of_send(
        self, sent: QueuedMessageRecord, message: Sent, wait_s: float, on_progress: ProgressFn | None
    ) -> TurnOutcome:
        if (sent.text, sent.attachments or []) != message:
            raise InvalidArgument(
                "client_message_id",
                "was already used for a different message in this session; use a new client_message_id",
            )
        return await self._waits.wait_for_message(sent.session_id, sent.id, wait_s, on_progress)

    def _model_titled(self, agent: AgentConfig | None, message: str | None) -> bool:
        return self._titles is not None and message is not None and wants_model_title(agent)

    async def _title(self, session_id: SessionId, agent: AgentConfig | None, message: str | None) -> None:
        """Title an untitled session from its first message: by the model for agents that opt in
        (in the background), else by the message's first words."""
        titles = self._titles
        if (
            titles is not None
            and agent is not None
            and message is not None
            and wants_model_title(agent)
            and titles.request(session_id, agent, message)
        ):
            return
        title = proposed_title(message)
        if title is not None:
            await self._parts.store.propose_title(session_id, title)


def _first_queued(
    session_id: SessionId, start: _Start, client_message_id: str | None, now: float
) -> QueuedMessageRecord | None:
    """The first message of a new session, queued for its first turn (None: there is none)."""
    if start.text is None:
        return None
    return QueuedMessageRecord.new(
        session_id,
        start.text,
        now=now,
        client_message_id=client_message_id,
        attachments=start.refs or None,
        blobs=start.blobs,
        trace_context=current_trace_context(),
        mode=start.mode,
    )


def ended_reason(session: SessionRecord) -> str:
    """Why a session takes no more messages."""
    if session.status == "completed":
        return "its task completed with a result"
    if session.status == "failed":
        return f"its task failed: {session.last_error or 'no reason recorded'}"
    return session.closed_reason or "closed by the caller"
