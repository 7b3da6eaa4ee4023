"""Per-connection limits for the HTTP server: a connection cap, and read deadlines for a
request's headers and body. uvicorn has a keep-alive timeout but no deadline for headers or
body, so one client trickling bytes could hold a connection (and its memory) for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import h11
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

# Seconds a client refused at the connection cap is told to wait.
RETRY_AFTER_S = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimits:
    max_connections: int
    header_read_timeout_s: float
    body_read_timeout_s: float
    max_request_bytes: int


def jsonrpc_error_response(
    status: int, code: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


class BodyDeadline:
    """Reads the whole request body within `body_read_timeout_s` and at most `max_request_bytes`,
    then hands it to the app; a slower body gets 408, a larger one 413."""

    def __init__(self, app: ASGIApp, limits: ConnectionLimits) -> None:
        self._app = app
        self._limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        received: list[Message] = []
        size = 0
        with anyio.move_on_after(self._limits.body_read_timeout_s) as deadline:
            while True:
                message = await receive()
                received.append(message)
                if message["type"] != "http.request":
                    break
                size += len(message.get("body", b""))
                if size > self._limits.max_request_bytes:
                    await _too_large(self._limits.max_request_bytes)(scope, receive, send)
                    return
                if not message.get("more_body", False):
                    break
        if deadline.cancelled_caught:
            await _too_slow(self._limits.body_read_timeout_s)(scope, receive, send)
            return
        body = b"".join(m.get("body", b"") for m in received if m["type"] == "http.request")
        replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
        replay += [m for m in received if m["type"] != "http.request"]

        async def replayed() -> Message:
            return replay.pop(0) if replay else await receive()

        await self._app(scope, replayed, send)


def _too_large(limit: int) -> Response:
    return jsonrpc_error_response(
        413,
        INVALID_REQUEST,
        f"the request body is over the limit of {limit} bytes (http.max_request_bytes in parley.yaml); "
        "send a smaller message or raise the limit",
        {"Connection": "close"},
    )


def _too_slow(timeout_s: float) -> Response:
    return jsonrpc_error_response(
        408,
        INVALID_REQUEST,
        f"the request body did not arrive within {timeout_s:g}s (http.body_read_timeout_s in parley.yaml); "
        "send it at once, or raise the limit",
        {"Connection": "close"},
    )


def _at_capacity(max_connections: int) -> Response:
    return jsonrpc_error_response(
        503,
        INTERNAL_ERROR,
        f"parley is serving its limit of {max_connections} connections; retry in {RETRY_AFTER_S}s, "
        "reuse connections (keep-alive), or raise http.max_connections in parley.yaml",
        {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
    )


def limited_h11_protocol(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a connection cap whose answer says what to do (uvicorn's own
    `limit_concurrency` answers a bare 503) and a deadline for each request's headers."""

    class LimitedH11Protocol(H11Protocol):
        def __init__(
            self,
            config: Config,
            server_state: ServerState,
            app_state: dict[str, Any],
            _loop: asyncio.AbstractEventLoop | None = None,
        ) -> None:
            super().__init__(config, server_state, app_state, _loop)
            self._header_timer: asyncio.TimerHandle | None = None
            self.app = _capped(self.app, server_state, limits.max_connections)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            self._disarm_header_timer()
            self._header_timer = self.loop.call_later(limits.header_read_timeout_s, self._header_timeout)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            # Still waiting for a complete request head: a request being read or answered is
            # bounded by the body deadline and the app instead.
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return LimitedH11Protocol


def _capped(app: Callable[..., Any], state: ServerState, max_connections: int) -> Callable[..., Any]:
    async def capped(scope: Scope, receive: Receive, send: Send) -> None:
        # This request's own connection and task are already counted.
        if len(state.connections) > max_connections or len(state.tasks) > max_connections:
            await _at_capacity(max_connections)(scope, receive, send)
            return
        await app(scope, receive, send)

    return capped
