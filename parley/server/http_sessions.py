"""A cap on MCP transport sessions that abandoned clients cannot use up.

The SDK's session manager refuses every new client with 503 once `max_sessions` are open,
and keeps an abandoned session for its idle timeout: 10,000 clients that initialize and go
away lock everyone out for that long. This table sits in front of the manager, sees every
request to /mcp, and keeps the sessions in least-recently-used order. At the cap a new
client takes the place of the session idle the longest; only when every session has a
request in flight is it refused. Sessions idle for `idle_timeout_s` are ended. Both end a
session the way a client does, with DELETE, so the manager frees it through its own path.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INTERNAL_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.server.http_limits import jsonrpc_error_response

logger = logging.getLogger(__name__)

_SESSION_HEADER = MCP_SESSION_ID_HEADER.encode("ascii")
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.encode("ascii")
# Seconds a refused client is told to wait: sessions free up as soon as any request ends.
RETRY_AFTER_S = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionLimits:
    max_sessions: int
    idle_timeout_s: float


@dataclass(slots=True)
class _Session:
    in_flight: int = 0
    idle_since: float = field(default_factory=anyio.current_time)
    # The ASGI `user` of the request that opened it (the bearer gate's AuthenticatedUser, or
    # None with auth: none): the SDK ends the session only for the same principal.
    user: Any = None


class SessionTable:
    """ASGI app in front of the SDK's /mcp app; `run()` must be open while it serves."""

    def __init__(self, inner: ASGIApp, limits: SessionLimits) -> None:
        self._inner = inner
        self._limits = limits
        # Least recently active first: eviction and expiry look at the front only.
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._opening = 0

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._expire_idle)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", []))
        session_id = headers.get(_SESSION_HEADER, b"").decode("latin-1") or None
        if session_id is not None:
            await self._serve_existing(session_id, scope, receive, send)
        elif headers.get(_VERSION_HEADER, b"").decode("latin-1") not in ("", *HANDSHAKE_PROTOCOL_VERSIONS):
            await self._inner(scope, receive, send)  # the sessionless 2026 era: nothing to count
        else:
            await self._serve_opening(scope, receive, send)

    async def _serve_existing(self, session_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            await self._inner(scope, receive, send)  # the manager answers 404
            return
        session.in_flight += 1
        status: int | None = None

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._inner(scope, receive, watch)
        finally:
            session.in_flight -= 1
            session.idle_since = anyio.current_time()
            if self._sessions.get(session_id) is session:
                ended = status == 404 or (
                    scope.get("method") == "DELETE" and status is not None and status < 300
                )
                if ended:
                    del self._sessions[session_id]
                else:
                    self._sessions.move_to_end(session_id)

    async def _serve_opening(self, scope: Scope, receive: Receive, send: Send) -> None:
        victim = self._make_room()
        if victim is False:
            logger.warning("refused a new MCP session: all %d sessions are busy", self._limits.max_sessions)
            await _at_capacity(self._limits.max_sessions)(scope, receive, send)
            return
        self._opening += 1
        opened: tuple[str, _Session] | None = None

        async def register(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                new_id = dict(message.get("headers", [])).get(_SESSION_HEADER, b"").decode("latin-1")
                if new_id:
                    opened = (new_id, _Session(in_flight=1, user=scope.get("user")))
                    self._sessions[new_id] = opened[1]
                    self._opening -= 1
            await send(message)

        try:
            if isinstance(victim, tuple):
                logger.info("closing the least recently used MCP session to admit a new client")
                await self._end(*victim)
            await self._inner(scope, receive, register)
        finally:
            if opened is None:
                self._opening -= 1
            else:
                new_id, session = opened
                session.in_flight -= 1
                session.idle_since = anyio.current_time()
                if self._sessions.get(new_id) is session:
                    self._sessions.move_to_end(new_id)

    def _make_room(self) -> tuple[str, _Session] | bool:
        """True if there is room; else an idle session to end for it (already forgotten, so
        concurrent openers pick different ones); False when every session is busy."""
        if len(self._sessions) + self._opening < self._limits.max_sessions:
            return True
        for session_id, session in self._sessions.items():
            if session.in_flight == 0:
                del self._sessions[session_id]
                return session_id, session
        return False

    async def _expire_idle(self) -> None:
        while True:
            now = anyio.current_time()
            next_due = now + self._limits.idle_timeout_s
            for session_id, session in list(self._sessions.items()):
                if session.in_flight or self._sessions.get(session_id) is not session:
                    continue
                due = session.idle_since + self._limits.idle_timeout_s
                if due > now:
                    next_due = due
                    break  # the rest were active more recently
                del self._sessions[session_id]
                logger.info("MCP session idle for %.1fs; closing it", now - session.idle_since)
                await self._end(session_id, session)
            # No request can make a session due sooner than this: one whose last request ends
            # now is due a whole timeout from now.
            await anyio.sleep(max(0.0, next_due - anyio.current_time()))

    async def _end(self, session_id: str, session: _Session) -> None:
        """End a session as its client would, with DELETE, as the principal who opened it (the
        SDK refuses anyone else); shielded, so a cancelled request that evicted it does not leave
        it half-closed in the manager."""
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "DELETE",
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "root_path": "",
            "query_string": b"",
            "headers": [(_SESSION_HEADER, session_id.encode("latin-1"))],
            "client": None,
            "server": None,
            "state": {},
        }
        if session.user is not None:
            scope["user"] = session.user
        sent_body = False

        async def receive() -> Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def discard(message: Message) -> None:
            pass

        with anyio.CancelScope(shield=True):
            try:
                await self._inner(scope, receive, discard)
            except Exception:
                # The manager may be stopping; the session goes with it either way.
                logger.debug("ending MCP session %s failed", session_id[:64], exc_info=True)


def _at_capacity(max_sessions: int) -> Response:
    return jsonrpc_error_response(
        503,
        INTERNAL_ERROR,
        f"parley is at its cap of {max_sessions} open MCP sessions and every one has a request in "
        f"flight; retry in {RETRY_AFTER_S}s, close sessions you no longer use (DELETE /mcp), or raise "
        "http.max_sessions in parley.yaml",
        {"Retry-After": str(RETRY_AFTER_S)},
    )
