"""Streamable HTTP: the same tools at exactly /mcp, plus /healthz, parley's own /v1 surface
(event streams, JSON endpoints, the AI SDK chat protocol) and the page for people at /ui, behind
the limits of `http:` in parley.yaml."""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from parley.config import HttpConfig
from parley.config.codes import E_BIND
from parley.errors import ConfigError, ListenError
from parley.server.auth_gate import BearerGate, HttpAuth, health_is_full
from parley.server.http_guard import HostGuard
from parley.server.http_limits import BodyDeadline, CallerShare, ConnectionLimits, limited_h11_protocol
from parley.server.http_prefix import strip_base_path
from parley.server.http_sessions import SessionLimits, SessionTable
from parley.server.metrics_route import MetricsSources, metrics_route
from parley.server.oauth_routes import OPEN_PATHS as OAUTH_OPEN_PATHS
from parley.server.ui_routes import with_ui
from parley.server.ui_signin import UiSignIn
from parley.server.v1_common import V1Context
from parley.server.v1_routes import v1_cors, v1_routes

LOOPBACK_NAMES = ("localhost",)
# Enough for a burst of connections while the event loop is busy; the kernel caps it anyway.
LISTEN_BACKLOG = 2048

Health = Callable[[], Awaitable[dict[str, Any]]]


def bare_host(host: str) -> str:
    """`[::1]` (URL form) -> `::1` (socket form)."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def http_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/mcp" if ":" in host else f"http://{host}:{port}/mcp"


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(bare_host(host)).is_loopback
    except ValueError:
        return False


def check_bind(host: str, insecure_bind: bool, authenticated: bool = False) -> None:
    """Refuse a non-loopback address without authentication (`auth: none`): anyone who can reach
    the port could drive every session."""
    if not is_loopback(host) and not insecure_bind and not authenticated:
        raise ConfigError(
            E_BIND,
            "(command line)",
            "--host",
            f"{host} is not a loopback address and parley authenticates nobody (auth: none); bind 127.0.0.1, "
            "set auth.mode to tokens or oauth in parley.yaml, or pass --insecure-bind if a proxy in front "
            "of parley authenticates callers (unsafe otherwise)",
        )


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port`, bound before anything else starts so a failure is one
    line that says what to do (uvicorn logs it and exits from inside the event loop)."""
    address = bare_host(host)
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(
            host,
            port,
            f"cannot listen on --host {host}: {exc.strerror}; use an address of this machine, "
            "e.g. 127.0.0.1 or ::1",
        ) from exc
    # IPv4 first for a name such as localhost, the address most clients try first.
    family, kind, proto, _, sockaddr = min(infos, key=lambda info: info[0] != socket.AF_INET)
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(
                host, port, f"port {port} is in use; pick another with --port or stop the other server"
            ) from exc
        raise ListenError(
            host, port, f"cannot listen on {host} port {port}: {exc.strerror}; pick another --host or --port"
        ) from exc
    return sock


def session_limits(config: HttpConfig) -> SessionLimits:
    return SessionLimits(max_sessions=config.max_sessions, idle_timeout_s=config.session_idle_timeout_s)


def connection_limits(config: HttpConfig, multi_user: bool) -> ConnectionLimits:
    """`multi_user`: auth tokens or oauth, whose unset per-principal caps get their defaults."""
    return ConnectionLimits.of(config, multi_user)


def accepted_hosts(config: HttpConfig) -> list[str]:
    """Host values accepted besides loopback: http.allowed_hosts and the host of http.public_url."""
    hosts = list(config.allowed_hosts)
    if config.public_url is not None:
        hosts.append(urlsplit(config.public_url).netloc)
    return hosts


def build_http_app(
    server: MCPServer[Any],
    host: str,
    health: Health,
    config: HttpConfig,
    auth: HttpAuth | None = None,
    v1: V1Context | None = None,
    metrics: MetricsSources | None = None,
    sign_in: UiSignIn | None = None,
) -> ASGIApp:
    # The SDK builds and configures its session manager here; parley serves it from its own
    # Starlette app, behind its own session table and guards. Its DNS-rebinding check is off
    # because LoopbackHostGuard does it exactly, on every route. Its session cap and idle
    # timeout stay as a backstop: the table ends idle sessions first and evicts at its cap.
    server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=False,  # Stateful streaming (SSE): progress notifications and elicitation need it.
        json_response=False,
        max_request_body_size=config.max_request_bytes,
        session_idle_timeout=config.session_idle_timeout_s,
        max_sessions=2 * config.max_sessions,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    sessions = SessionTable(StreamableHTTPASGIApp(manager), session_limits(config))

    async def healthz(request: Request) -> Response:
        report = {"status": "ok", **(await health()), "mcp_sessions": sessions.open_sessions}
        # Unavailable (the database does not answer): a load balancer sends no traffic here.
        status_code = 503 if report["status"] == "unavailable" else 200
        if auth is not None and not health_is_full(request.scope):
            # Served to anyone: nothing about the process, its sessions or its database.
            report = {"status": report["status"]}
        return JSONResponse(report, status_code=status_code)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run(), sessions.run():
            yield

    routes = [Route("/mcp", endpoint=sessions), Route("/healthz", healthz, methods=["GET"])]
    routes += v1_routes(v1) if v1 is not None else []
    oauth = v1.oauth if v1 is not None else None
    routes += oauth.open_routes() if oauth is not None else []
    routes += [metrics_route(metrics)] if metrics is not None else []
    starlette_app = Starlette(routes=routes + (auth.routes if auth else []), lifespan=lifespan)
    limits = connection_limits(config, multi_user=auth is not None)
    triggers = v1.triggers if v1 is not None else None
    signed = triggers.signed_paths if triggers is not None else frozenset()
    if triggers is not None:
        limits = replace(limits, body_limits=triggers.body_limits)
    # Inside out: the body is read only once the caller is known and within its share, so an
    # unauthenticated or over-cap request is answered on its headers alone. The one exception
    # is a signed trigger's path (its signature is over the body): let through the gate, it is
    # counted per address and its body read to the trigger's own limit, within a short deadline.
    app: ASGIApp = BodyDeadline(starlette_app, limits)
    app = CallerShare(app, limits)
    if auth is not None:
        oauth_paths = OAUTH_OPEN_PATHS if oauth is not None else frozenset()
        app = BearerGate(app, auth.verifier, auth.challenge, auth.open_paths | signed | oauth_paths)
    if v1 is not None:
        # The page for people (/ui): open, since it asks for the token; its data comes from /v1.
        app = with_ui(app, sign_in)
    if config.cors_origins:
        # Outside the bearer gate: a browser's preflight carries no token.
        app = v1_cors(app, config.cors_origins)
    extra = accepted_hosts(config)
    # A non-loopback bind without named hosts answers any Host, as a server behind a proxy must.
    loopback = is_loopback(host)
    # A loopback address other than the usual names (--host 127.0.0.2) is what clients send as Host.
    bound = bare_host(host) if loopback and host not in LOOPBACK_NAMES else None
    guarded = HostGuard(app, extra, config.cors_origins, bound) if loopback or extra else app
    # Outermost: every part of parley sees its routes' own paths, with or without the prefix.
    return strip_base_path(guarded, config.base_path)


def uvicorn_config(app: ASGIApp, config: HttpConfig, multi_user: bool = False) -> uvicorn.Config:
    """`multi_user`: auth tokens or oauth (per-address caps have defaults then)."""
    return uvicorn.Config(
        app,
        # X-Forwarded-For / -Proto are believed only from the configured proxies (uvicorn's default
        # would trust any process on this machine).
        proxy_headers=bool(config.trusted_proxies),
        forwarded_allow_ips=list(config.trusted_proxies) or None,
        http=limited_h11_protocol(connection_limits(config, multi_user)),
        log_level="warning",
        lifespan="on",
        backlog=LISTEN_BACKLOG,
        timeout_keep_alive=config.keep_alive_timeout_s,  # type: ignore[arg-type]
        h11_max_incomplete_event_size=config.max_header_bytes,
        # Waiting calls end at once on shutdown; their turns go on in the next process.
        timeout_graceful_shutdown=1,
    )


class QuietUvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: parley drains its sessions on SIGTERM itself,
    and uvicorn would re-raise the signal (killing the process) once it stops serving."""

    @contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield
