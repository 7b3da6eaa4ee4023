"""The client: connect to parley over stdio (starting `parley serve`) or streamable HTTP."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult, Implementation

from parley import __version__
from parley.client import tasks
from parley.client.calls import Calls
from parley.client.connection import Connection
from parley.client.errors import ConnectionFailed
from parley.client.handlers import Handlers, OnApproval, OnEvent, OnQuestion
from parley.client.models import (
    AgentList,
    DraftItem,
    PendingItem,
    PendingList,
    SessionPage,
    SessionState,
    SessionSummary,
)
from parley.client.session import Session, new_message_id
from parley.client.sse import EventStream
from parley.tls import http_client

# The server caps a call's wait (runtime.max_wait_s, 55 s by default); this stays below the 60 s
# many proxies allow a request.
DEFAULT_WAIT_S = 45.0
# How long a call keeps trying to connect again after the connection broke.
DEFAULT_RECONNECT_S = 30.0
CLIENT_INFO = Implementation(name="parley-client", version=__version__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """How a client waits, reconnects, and who decides what the agent asks."""

    wait_s: float = DEFAULT_WAIT_S
    reconnect_s: float = DEFAULT_RECONNECT_S
    tasks: bool = False
    # Answer approvals and questions as the person at this client (form elicitation; forms.py).
    as_person: bool = False
    on_approval: OnApproval | None = None
    on_question: OnQuestion | None = None
    on_event: OnEvent | None = None


class Parley:
    """A connected client. Made by `connect_stdio` or `connect_http`; valid inside their `async with`."""

    def __init__(
        self, calls: Calls, *, tasks_asked: bool = False, event_stream: EventStream | None = None
    ) -> None:
        self._calls = calls
        self._tasks_asked = tasks_asked
        self._event_stream = event_stream

    @property
    def mcp(self) -> Client:
        """The current mcp.Client, for what this client does not wrap (it changes on reconnect)."""
        return self._calls.connection.client

    @property
    def uses_tasks(self) -> bool:
        """Whether turn calls run as MCP tasks (asked for with tasks=True, and offered by the server)."""
        return self._tasks_asked and tasks.offered(self._calls.connection.client.server_capabilities)

    @property
    def reconnects(self) -> int:
        """How often the connection was made again after it broke."""
        return self._calls.connection.reconnects

    async def agents(self) -> AgentList:
        return await self._calls.read("list_agents", {}, AgentList)

    async def start(
        self,
        agent: str,
        message: str | None = None,
        *,
        kind: str | None = None,
        inputs: dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None,
        attachments: Sequence[Mapping[str, Any]] | None = None,
        on_approval: OnApproval | None = None,
        on_question: OnQuestion | None = None,
        on_event: OnEvent | None = None,
        plan: bool | None = None,
    ) -> Session:
        """Start a session with `agent`; with a message (or inputs), follow its first turn until it
        rests (`session.last` is its outcome). Without either, the session is ready and idle.
        `plan` (agents with plan mode): True makes the first turn a planning turn, False an
        ordinary one; None leaves it to the agent's plan_mode."""
        arguments: dict[str, Any] = {"agent": agent}
        given = (
            ("message", message),
            ("kind", kind),
            ("inputs", inputs),
            ("settings", settings),
            ("plan", plan),
        )
        for name, value in given:
            if value is not None:
                arguments[name] = value
        if attachments:
            arguments["attachments"] = [dict(a) for a in attachments]
        # Also without a message: a start sent again after a dropped connection finds its session.
        arguments["client_message_id"] = new_message_id()
        handlers = self._calls.handlers.over(on_approval, on_question, on_event)
        outcome = await self._calls.turn("start_session", arguments, session_id=None, handlers=handlers)
        return Session(
            self._calls, outcome.session_id, agent=agent, last=outcome, event_stream=self._event_stream
        )

    def session(self, session_id: str) -> Session:
        """A handle on a session by its id (nothing is read yet: `resume` reads it)."""
        return Session(self._calls, session_id, event_stream=self._event_stream)

    async def resume(self, session_id: str) -> Session:
        """A handle on an existing session, read from the server (SessionNotFound if it is not yours)."""
        state = await self._calls.read(
            "get_session", {"session_id": session_id, "messages_limit": 1}, SessionState
        )
        return Session(
            self._calls, session_id, agent=state.agent, last=state.last_turn, event_stream=self._event_stream
        )

    async def list_sessions(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        title: str | None = None,
        tag: str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
    ) -> SessionPage:
        """One page of your sessions, newest first; `title` (text it contains), `tag` and the ISO
        8601 `created_after` / `created_before` narrow them."""
        arguments: dict[str, Any] = {"limit": limit}
        narrowing = {
            "status": status,
            "agent": agent,
            "cursor": cursor,
            "title": title,
            "tag": tag,
            "created_after": created_after,
            "created_before": created_before,
        }
        for name, value in narrowing.items():
            if value is not None:
                arguments[name] = value
        return await self._calls.read("list_sessions", arguments, SessionPage)

    async def sessions(
        self, *, status: str | None = None, agent: str | None = None
    ) -> AsyncIterator[SessionSummary]:
        """All your sessions, newest first, page by page."""
        cursor: str | None = None
        while True:
            page = await self.list_sessions(status=status, agent=agent, limit=100, cursor=cursor)
            for summary in page.sessions:
                yield summary
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def pending(self, limit: int = 50) -> list[PendingItem]:
        """The approvals and questions waiting for your decision, across your sessions."""
        return (await self._calls.read("list_pending", {"limit": limit}, PendingList)).pending

    async def drafts(self, limit: int = 50) -> list[DraftItem]:
        """The draft plans waiting for review across your sessions (Session.execute_plan approves one)."""
        return (await self._calls.read("list_pending", {"limit": limit}, PendingList)).drafts

    async def fork(
        self, session_id: str, at_turn: int, *, agent_version: str | None = None, title: str | None = None
    ) -> Session:
        """A new session of yours with the transcript of `session_id` up to the end of turn
        `at_turn` (0: before the first), at rest; `agent_version` pins its turns to that version."""
        arguments: dict[str, Any] = {"session_id": session_id, "at_turn": at_turn}
        if agent_version is not None:
            arguments["agent_version"] = agent_version
        if title is not None:
            arguments["title"] = title
        summary = await self._calls.read("fork_session", arguments, SessionSummary)
        return Session(self._calls, summary.session_id, agent=summary.agent, event_stream=self._event_stream)

    async def replay(self, session_id: str, agent: str | None = None) -> SessionSummary:
        """Replay a session on its agent as configured now (or `agent`): a new session, tagged eval
        and replay, whose turns run on the server one by one; only configured reads run for real."""
        arguments: dict[str, Any] = {"session_id": session_id}
        if agent is not None:
            arguments["agent"] = agent
        return await self._calls.read("replay_session", arguments, SessionSummary)


# ------------------------------------------------------------------------------- connecting


@asynccontextmanager
async def _connected(
    open_client: Callable[[], AbstractAsyncContextManager[Client]],
    options: Options,
    target: str,
    event_stream: EventStream | None = None,
) -> AsyncIterator[Parley]:
    connection = Connection(open_client, reconnect_s=options.reconnect_s, target=target)
    handlers = Handlers(
        on_approval=options.on_approval, on_question=options.on_question, on_event=options.on_event
    )
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(connection.run)
            try:
                calls = Calls(
                    connection, wait_s=options.wait_s, handlers=handlers, as_person=options.as_person
                )
                yield Parley(calls, tasks_asked=options.tasks, event_stream=event_stream)
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The task group wraps whatever ends it; a caller expects the one error itself (a failed
        # connection, or its own exception from inside `async with`).
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def _no_blocking_forms(context: Any, params: Any) -> ElicitResult:
    # Declares form elicitation (as_person); parley asks a 2026-07-28 client by input-required
    # rounds, which calls.py answers itself, so nothing is put to this callback.
    return ElicitResult(action="cancel")


def _mcp_client(transport: Any, options: Options) -> Client:
    extensions = [tasks.TasksExtension()] if options.tasks else None
    forms = _no_blocking_forms if options.as_person else None
    return Client(
        transport, mode="auto", client_info=CLIENT_INFO, extensions=extensions, elicitation_callback=forms
    )


@asynccontextmanager
async def connect_stdio(
    config: str | Path | None = None,
    db: str | Path | None = None,
    *,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
    log_level: str = "WARNING",
    server_log: TextIO | None = None,
    options: Options | None = None,
) -> AsyncIterator[Parley]:
    """Start `parley serve` (this Python's parley, or `command`) and talk to it over stdio.

    `config` and `db` are passed as --config and --db (default: PARLEY_CONFIG and PARLEY_DB, else the
    embedded defaults). The server inherits this process's environment (API keys too), plus `env`.
    Its log (at `log_level`) goes to `server_log` (default stderr). If the server dies, the next
    call starts a new one on the same database and carries on."""
    options = options or Options()
    argv = [*(command or [sys.executable, "-m", "parley"]), "serve", "--log-level", log_level]
    if config is not None:
        argv += ["--config", str(config)]
    if db is not None:
        argv += ["--db", str(db)]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env={**os.environ, **(env or {})})
    errlog = server_log or sys.stderr

    @asynccontextmanager
    async def open_client() -> AsyncIterator[Client]:
        async with _mcp_client(stdio_client(params, errlog=errlog), options) as client:
            # The SDK checks results against the listed output schemas: list them once per connection.
            await client.list_tools()
            yield client

    async with _connected(open_client, options, f"parley serve ({' '.join(argv)})") as parley:
        yield parley


@asynccontextmanager
async def connect_http(
    url: str,
    token: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    options: Options | None = None,
) -> AsyncIterator[Parley]:
    """Talk to `parley serve --http` at `url` (…/mcp), with `token` as the bearer token."""
    options = options or Options()
    sent_headers = dict(headers or {})
    if token:
        sent_headers["Authorization"] = f"Bearer {token}"
    # Reads may last a whole wait; the connection is checked again after the call margin.
    timeout = httpx2.Timeout(30.0, read=options.wait_s + 60.0)
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(http_client(headers=sent_headers, timeout=timeout))

        @asynccontextmanager
        async def open_client() -> AsyncIterator[Client]:
            # The SDK reports a refused request as "Server returned an error response": keep the
            # HTTP status (401 without a valid token, 403 without the scope) to say what happened.
            refused: list[str] = []

            async def note_refusal(response: httpx2.Response) -> None:
                if response.status_code >= 400:
                    refused.append(f"HTTP {response.status_code} {response.reason_phrase}".rstrip())

            hooks = {"response": [note_refusal]}
            # A fresh HTTP client per connection: the old one's pool may hold the broken sockets.
            try:
                async with (
                    http_client(headers=sent_headers, timeout=timeout, event_hooks=hooks) as mcp_http,
                    _mcp_client(streamable_http_client(url, http_client=mcp_http), options) as client,
                ):
                    await client.list_tools()
                    yield client
            except Exception as exc:
                if refused and not isinstance(exc, GeneratorExit):
                    hint = (
                        " (is the token right? --token, or connect_http(url, token))"
                        if "401" in refused[-1]
                        else ""
                    )
                    raise ConnectionFailed(f"{url} answered {refused[-1]}{hint}") from exc
                raise

        async with _connected(
            open_client, options, url, EventStream(http, url, reconnect_s=options.reconnect_s)
        ) as parley:
            yield parley
