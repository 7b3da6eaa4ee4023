"""Per-connection limits for the HTTP server: a connection cap with a reserve for /healthz,
caps per client address and per principal, and read deadlines for a request's headers and
body. uvicorn has a keep-alive timeout but no deadline for headers or body, so one client
trickling bytes could hold a connection (and its memory) for ever; and one global cap let one
principal's idle event streams lock out everyone else, /healthz included.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import h11
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from parley.config import HttpConfig
from parley.server.auth_tokens import principal_of

# A trigger's body arrives at once or not at all: it is read within this, whatever
# http.body_read_timeout_s says (server/triggers.py).
SIGNED_BODY_TIMEOUT_S = 5.0

# Seconds a client refused at the connection cap is told to wait.
RETRY_AFTER_S = 1
HEALTH_PATH = "/healthz"
# Open event streams per principal when auth is on and http.max_streams_per_principal is unset.
DEFAULT_STREAMS_PER_PRINCIPAL = 16
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimits:
    max_connections: int
    header_read_timeout_s: float
    keep_alive_timeout_s: float
    body_read_timeout_s: float
    max_request_bytes: int
    # Of max_connections, the part only /healthz may use.
    reserve: int = 0
    # None: no cap (auth: none, one local user, unless configured).
    per_principal: int | None = None
    streams_per_principal: int | None = None
    per_address: int | None = None
    # Peers whose connections are not counted per address (their X-Forwarded-For is believed).
    trusted_proxies: tuple[_Network, ...] = ()
    # Paths with a body limit of their own, read within SIGNED_BODY_TIMEOUT_S (the triggers').
    body_limits: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, config: HttpConfig, multi_user: bool) -> ConnectionLimits:
        """The limits `config` sets; those left unset get their defaults for many users
        (`multi_user`: auth tokens or oauth) or none (auth: none)."""
        reserve = config.connection_reserve
        if reserve is None:
            reserve = min(max(1, config.max_connections // 20), config.max_connections - 1)
        share = max(1, (config.max_connections - reserve) // 4) if multi_user else None
        streams = min(DEFAULT_STREAMS_PER_PRINCIPAL, share) if share is not None else None
        per_principal = config.max_connections_per_principal or share
        return cls(
            max_connections=config.max_connections,
            header_read_timeout_s=config.header_read_timeout_s,
            keep_alive_timeout_s=config.keep_alive_timeout_s,
            body_read_timeout_s=config.body_read_timeout_s,
            max_request_bytes=config.max_request_bytes,
            reserve=reserve,
            per_principal=per_principal,
            streams_per_principal=config.max_streams_per_principal or streams,
            per_address=config.max_connections_per_address or share,
            trusted_proxies=tuple(ipaddress.ip_network(a, strict=False) for a in config.trusted_proxies),
        )

    def trusts(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted_proxies)


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
        own_limit = self._limits.body_limits.get(scope["path"])
        max_bytes = self._limits.max_request_bytes if own_limit is None else own_limit
        timeout_s = self._limits.body_read_timeout_s
        if own_limit is not None:
            timeout_s = min(timeout_s, SIGNED_BODY_TIMEOUT_S)
        limit_field = "http.max_request_bytes" if own_limit is None else "the trigger's max_body_bytes"
        with anyio.move_on_after(timeout_s) as deadline:
            while True:
                message = await receive()
                received.append(message)
                if message["type"] != "http.request":
                    break
                size += len(message.get("body", b""))
                if size > max_bytes:
                    await _too_large(max_bytes, limit_field)(scope, receive, send)
                    return
                if not message.get("more_body", False):
                    break
        if deadline.cancelled_caught:
            await _too_slow(timeout_s)(scope, receive, send)
            return
        body = b"".join(m.get("body", b"") for m in received if m["type"] == "http.request")
        replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
        replay += [m for m in received if m["type"] != "http.request"]

        async def replayed() -> Message:
            return replay.pop(0) if replay else await receive()

        await self._app(scope, replayed, send)


def _too_large(limit: int, limit_field: str = "http.max_request_bytes") -> Response:
    return jsonrpc_error_response(
        413,
        INVALID_REQUEST,
        f"the request body is over the limit of {limit} bytes ({limit_field} in parley.yaml); "
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
    `limit_concurrency` answers a bare 503), a cap per client address, and a deadline for each
    request's headers."""
    # Open connections per peer address (trusted proxies not counted), shared by every connection.
    per_address: Counter[str] = Counter()

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
            self._counted_as: str | None = None
            self.app = _capped(self.app, server_state, limits)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            address = peer[0] if isinstance(peer, tuple) and peer else None
            if limits.per_address is not None and address is not None and not limits.trusts(address):
                if per_address[address] >= limits.per_address:
                    # Refused before its request is read: one address cannot hold every slot
                    # (idle or trickling connections), whoever it claims to be.
                    transport.write(_raw_response(_too_many_from_address(limits.per_address)))
                    transport.close()
                    return
                per_address[address] += 1
                self._counted_as = address
            self._arm_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # An idle keep-alive connection is uvicorn's to close, after keep_alive_timeout_s;
            # the next request's head then has its own deadline on top.
            self._arm_header_timer(limits.keep_alive_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            if self._counted_as is not None:
                per_address[self._counted_as] -= 1
                if per_address[self._counted_as] <= 0:
                    del per_address[self._counted_as]
                self._counted_as = None
            super().connection_lost(exc)

        def _arm_header_timer(self, idle_s: float = 0.0) -> None:
            self._disarm_header_timer()
            deadline_s = idle_s + limits.header_read_timeout_s
            self._header_timer = self.loop.call_later(deadline_s, self._header_timeout)

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


def _capped(app: Callable[..., Any], state: ServerState, limits: ConnectionLimits) -> Callable[..., Any]:
    async def capped(scope: Scope, receive: Receive, send: Send) -> None:
        # This request's own connection and task are already counted. The reserve is for
        # /healthz only, so a load balancer still gets an answer from a busy replica.
        cap = limits.max_connections
        if scope.get("path") != HEALTH_PATH:
            cap -= limits.reserve
        if len(state.connections) > cap or len(state.tasks) > cap:
            await _at_capacity(limits.max_connections)(scope, receive, send)
            return
        await app(scope, receive, send)

    return capped


def _raw_response(response: Response) -> bytes:
    """`response` as HTTP/1.1 bytes, for a connection refused before h11 has read a request."""
    reason = {503: b"Service Unavailable"}.get(response.status_code, b"")
    head = b"HTTP/1.1 %d %s\r\n" % (response.status_code, reason)
    head += b"".join(k + b": " + v + b"\r\n" for k, v in response.raw_headers)
    return head + b"\r\n" + bytes(response.body)


def _too_many_from_address(per_address: int) -> Response:
    return jsonrpc_error_response(
        503,
        INTERNAL_ERROR,
        f"this client address already has {per_address} connections open to parley "
        f"(http.max_connections_per_address in parley.yaml); reuse them (keep-alive), close idle ones, "
        f"or retry in {RETRY_AFTER_S}s",
        {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
    )


def announces_body(scope: Scope) -> bool:
    """Whether the request says a body follows (which a refusal leaves unread)."""
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


def _is_stream(scope: Scope) -> bool:
    """Whether the request opens an event stream: held open for as long as the client wants."""
    method, path = str(scope.get("method")), str(scope["path"])
    if path == "/mcp":
        return method == "GET"
    if path == "/v1/chat":
        return method == "POST"
    return path == "/v1/events" or (
        path.startswith(("/v1/sessions/", "/v1/chat/")) and path.endswith(("/events", "/stream"))
    )


class CallerShare:
    """Caps what one caller holds at once: requests in flight and event streams per principal
    (the bearer gate in front of it has set the user), or per client address (the
    X-Forwarded-For one behind a trusted proxy) for a request without a principal. /healthz is
    never counted. Over a cap: 429 with Retry-After, saying which limit and what to do."""

    def __init__(self, app: ASGIApp, limits: ConnectionLimits) -> None:
        self._app = app
        self._limits = limits
        self._requests: Counter[str] = Counter()
        self._streams: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:
            await self._app(scope, receive, send)
            return
        user = scope.get("user")
        if isinstance(user, AuthenticatedUser):
            key = "principal:" + principal_of(user.access_token).id
            cap, field = self._limits.per_principal, "http.max_connections_per_principal"
            stream_cap = self._limits.streams_per_principal
        else:
            client = scope.get("client")
            key = "address:" + (str(client[0]) if client else "")
            cap, field = self._limits.per_address, "http.max_connections_per_address"
            stream_cap = None
        stream = _is_stream(scope)
        if cap is not None and self._requests[key] >= cap:
            await _too_many(scope, f"{cap} requests in flight", field)(scope, receive, send)
            return
        if stream and stream_cap is not None and self._streams[key] >= stream_cap:
            streams = f"{stream_cap} event streams open"
            await _too_many(scope, streams, "http.max_streams_per_principal")(scope, receive, send)
            return
        self._requests[key] += 1
        self._streams[key] += stream
        try:
            await self._app(scope, receive, send)
        finally:
            self._requests[key] -= 1
            self._streams[key] -= stream
            for counter in (self._requests, self._streams):
                if counter[key] <= 0:
                    del counter[key]


def _too_many(scope: Scope, held: str, field: str) -> Response:
    detail = (
        f"you already have {held} at this parley ({field} in parley.yaml); close one you no longer "
        f"use, or retry in {RETRY_AFTER_S}s"
    )
    headers = {"Retry-After": str(RETRY_AFTER_S)}
    if announces_body(scope):
        headers["Connection"] = "close"  # its body is never read
    if scope["path"].startswith("/v1/"):
        body = {"type": "urn:parley:problem:too-many-requests", "title": "too many requests", "status": 429}
        return Response(
            json.dumps({**body, "detail": detail}),
            status_code=429,
            media_type="application/problem+json",
            headers=headers,
        )
    return jsonrpc_error_response(429, INTERNAL_ERROR, detail, headers)
