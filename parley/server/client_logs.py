"""MCP logging: parley's own log records about a caller's sessions, sent to that caller as
`notifications/message`, so a client's log pane shows what the server does for it (session
started, turn ended, a tool call failed, an MCP server unreachable...).

Who gets what:
- A record is forwarded only if it is about a session (runtime/session_log.py) and only to a
  follower with the same owner that follows that session. A follower follows the sessions its
  calls name (`session_id`) and the ones its calls create; the owner check makes naming a
  foreign session id useless. Records about the process (scans, purges) never leave.
- 2025-11-25 clients choose a level per connection with `logging/setLevel`; nothing is sent
  before that. Records go on the connection's own channel (stdio, or the standalone SSE stream
  that clients open on HTTP), also after the call that started a turn has returned.
- 2026-07-28 clients opt in per request with `_meta["io.modelcontextprotocol/logLevel"]`;
  records go on that request's stream while it is open, as the specification requires.
- Every message is passed through the redaction function once more; a slow client loses log
  lines (bounded buffers) and never holds up a turn.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.connection import allowed_log_levels
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.types import (
    EmptyResult,
    LoggingLevel,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    SetLevelRequestParams,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from parley.redaction import redact
from parley.runtime.session_log import OWNER_ATTR, SESSION_ATTR
from parley.server.connections import connection_of

logger = logging.getLogger(__name__)

# RFC 5424 levels as MCP names them, mapped onto Python's numbers (notice and alert fall between).
MCP_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": 25,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": 55,
    "emergency": 60,
}
assert set(MCP_LEVELS) == set(get_args(LoggingLevel))

# Log lines waiting for a slow client, per follower; beyond this they are dropped.
BUFFER = 256
# How long a finished call's response waits for its last log lines to go out.
FLUSH_S = 2.0

_CONNECTION_FOLLOWER = "dev.parley/log-follower"

OwnerOf = Callable[[Any], str]


def mcp_level(levelno: int) -> LoggingLevel:
    """The MCP name of a Python level: the highest MCP level at or below it."""
    name: LoggingLevel = "debug"
    for candidate, number in MCP_LEVELS.items():
        if levelno >= number:
            name = candidate  # type: ignore[assignment]
    return name


@dataclass(frozen=True, slots=True)
class LogLine:
    level: LoggingLevel
    logger: str
    session_id: str
    data: dict[str, Any]


@dataclass(eq=False)
class Follower:
    """One client's interest: an owner, a threshold and the sessions it follows."""

    owner: str
    level: int
    send: MemoryObjectSendStream[LogLine]
    sessions: set[str] = field(default_factory=set)

    def offer(self, record: logging.LogRecord, session_id: str) -> None:
        if record.levelno < self.level or session_id not in self.sessions:
            return
        line = LogLine(
            level=mcp_level(record.levelno),
            logger=record.name,
            session_id=session_id,
            data={
                "message": redact(record.getMessage()),
                "session_id": session_id,
                "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            },
        )
        with suppress(anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.send.send_nowait(line)


# The followers of the call whose handler is running in this context: a record made there is
# about a session that call works on (and the service has checked that the caller owns it).
_CALL_FOLLOWERS: ContextVar[tuple[Follower, ...]] = ContextVar("parley_call_followers", default=())


def _notification(line: LogLine) -> LoggingMessageNotification:
    return LoggingMessageNotification(
        params=LoggingMessageNotificationParams(level=line.level, logger=line.logger, data=line.data)
    )


class ClientLogRelay(logging.Handler):
    """A logging handler on the `parley` logger that hands records about sessions to the
    followers of those sessions, plus the MCP side: `logging/setLevel` and a middleware."""

    def __init__(self, owner_of: OwnerOf, background: TaskGroup | None) -> None:
        super().__init__(level=logging.DEBUG)
        self._owner_of = owner_of
        # Runs the senders of connection-wide followers; it must outlive every connection.
        self._background = background
        self._followers: set[Follower] = set()
        self._loop_thread = threading.get_ident()
        self._target: logging.Logger | None = None
        self._configured = logging.NOTSET

    # ------------------------------------------------------------------ the logging side

    async def run(self, logger_name: str = "parley", *, task_status: TaskStatus[None]) -> None:
        """Receive the records of `logger_name` until cancelled."""
        target = logging.getLogger(logger_name)
        previous = target.level
        self._target, self._configured = target, target.getEffectiveLevel()
        target.addHandler(self)
        try:
            task_status.started()
            await anyio.sleep_forever()
        finally:
            target.removeHandler(self)
            target.setLevel(previous)
            self._target = None

    def _follow(self, follower: Follower) -> None:
        self._followers.add(follower)
        self._retune()

    def _unfollow(self, follower: Follower) -> None:
        self._followers.discard(follower)
        self._retune()

    def _retune(self) -> None:
        """The logger lets a level through only while a client asks for it (or the server's own
        log wants it): records below that are not even made, on every step of every turn. The
        server's own log keeps the level its handlers were given."""
        if self._target is not None:
            wanted = min((f.level for f in self._followers), default=self._configured)
            self._target.setLevel(min(wanted, self._configured))

    def emit(self, record: logging.LogRecord) -> None:
        session_id = getattr(record, SESSION_ATTR, None)
        owner = getattr(record, OWNER_ATTR, None)
        # Memory streams belong to the event loop: a record from another thread is not forwarded.
        if session_id is None or owner is None or threading.get_ident() != self._loop_thread:
            return
        for follower in _CALL_FOLLOWERS.get():
            if follower.owner == owner:
                follower.sessions.add(session_id)
        for follower in list(self._followers):
            if follower.owner == owner:
                follower.offer(record, session_id)

    # ------------------------------------------------------------------ logging/setLevel

    async def set_level(
        self, ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams
    ) -> EmptyResult:
        """2025-11-25: from now on, send this connection the lines about its sessions at or above
        `level`. Asking again changes the level."""
        connection = connection_of(ctx.session)
        level = MCP_LEVELS[params.level]
        follower: Follower | None = connection.state.get(_CONNECTION_FOLLOWER) if connection else None
        if follower is not None:
            follower.level = level
            self._retune()
            return EmptyResult()
        if connection is None or self._background is None:
            return EmptyResult()  # accepted, but this connection has no channel to send on
        send, receive = anyio.create_memory_object_stream[LogLine](BUFFER)
        follower = Follower(owner=self._owner_of(ctx), level=level, send=send)
        connection.state[_CONNECTION_FOLLOWER] = follower
        self._follow(follower)
        standalone = ctx.session
        scope = anyio.CancelScope()

        def stop() -> None:
            self._unfollow(follower)
            send.close()
            scope.cancel()

        connection.exit_stack.callback(stop)
        self._background.start_soon(self._send_connection_lines, receive, standalone, scope)
        return EmptyResult()

    @staticmethod
    async def _send_connection_lines(
        receive: MemoryObjectReceiveStream[LogLine],
        standalone: Any,
        scope: anyio.CancelScope,
    ) -> None:
        with scope, receive:
            async for line in receive:
                try:
                    await standalone.send_notification(_notification(line))
                except Exception as exc:
                    # The request's stream or the connection closed; the line is lost, not the turn.
                    logger.debug("a log line for the client was not delivered: %s", type(exc).__name__)

    # ------------------------------------------------------------------ the middleware

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        named = _named_session(ctx.params)
        connection = connection_of(ctx.session)
        followers: list[Follower] = []
        shared: Follower | None = connection.state.get(_CONNECTION_FOLLOWER) if connection else None
        if shared is not None:
            followers.append(shared)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            allowed = allowed_log_levels(ctx.protocol_version, ctx.meta)
            if allowed:
                level = min(MCP_LEVELS[name] for name in allowed)
                return await self._with_call_follower(ctx, call_next, level, named, followers)
        if shared is not None and named is not None:
            shared.sessions.add(named)
        token = _CALL_FOLLOWERS.set(tuple(followers))
        try:
            return await call_next(ctx)
        finally:
            _CALL_FOLLOWERS.reset(token)

    async def _with_call_follower(
        self,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        level: int,
        session_id: str | None,
        others: list[Follower],
    ) -> HandlerResult:
        """2026-07-28: lines at or above `level` about this call's sessions, on this call's stream."""
        send, receive = anyio.create_memory_object_stream[LogLine](BUFFER)
        follower = Follower(owner=self._owner_of(ctx), level=level, send=send)
        if session_id is not None:
            follower.sessions.add(session_id)
        request_id = ctx.request_id

        async def deliver() -> None:
            with receive:
                async for line in receive:
                    try:
                        await ctx.session.send_notification(
                            _notification(line), related_request_id=request_id
                        )
                    except Exception as exc:
                        logger.debug("a log line for the client was not delivered: %s", type(exc).__name__)

        self._follow(follower)
        token = _CALL_FOLLOWERS.set((*others, follower))
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(deliver)
                try:
                    result = await call_next(ctx)
                finally:
                    self._unfollow(follower)
                    send.close()
                    # The response waits for the lines made during the call, not for ever.
                    tg.cancel_scope.deadline = anyio.current_time() + FLUSH_S
        finally:
            _CALL_FOLLOWERS.reset(token)
        return result


def _named_session(params: Mapping[str, Any] | None) -> str | None:
    arguments = (params or {}).get("arguments")
    if isinstance(arguments, Mapping):
        session_id = arguments.get("session_id")
        if isinstance(session_id, str):
            return session_id
    return None
