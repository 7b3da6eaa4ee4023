"""parley served over HTTP: /mcp, /healthz, /v1, /ui and /metrics on one listener, around the
app that parley.app composes. Kept apart from parley.app so that stdio, `parley eval` and the
other commands never import uvicorn and the HTTP routes (about 0.15 s of a start)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable

import anyio
import httpx2
import uvicorn

from parley.app import App, Seams, freeze_startup_heap, mcp_server, on_signal, running_app
from parley.config import ServerConfig
from parley.errors import ConfigErrors
from parley.runtime.tracing import Tracing
from parley.server.auth_gate import build_http_auth
from parley.server.http import (
    QuietUvicorn,
    bind_listener,
    build_http_app,
    check_bind,
    http_url,
    uvicorn_config,
)
from parley.server.metrics_route import MetricsSources
from parley.server.oauth_routes import OAuthRoutes
from parley.server.triggers import TriggerRoutes
from parley.server.ui_signin import build_ui_sign_in
from parley.server.v1_common import StreamSettings, V1Context
from parley.tls import http_client

logger = logging.getLogger(__name__)


async def serve_http(
    config: ServerConfig,
    host: str,
    port: int,
    insecure_bind: bool,
    on_listening: Callable[[str, int], Awaitable[None]] | None = None,
    *,
    tracing: Tracing | None = None,
    seams: Seams | None = None,
) -> None:
    check_http(config, host, insecure_bind)
    # Bound before the store opens, so a port in use is reported before anything starts.
    listener = bind_listener(host, port)
    with listener:
        async with running_app(config, tracing, seams) as app, anyio.create_task_group() as tg:
            stop = anyio.Event()
            await tg.start(on_signal, stop.set)
            freeze_startup_heap()
            await serve_app_http(config, app, listener, stop, on_listening, host)
            tg.cancel_scope.cancel()


def check_http(config: ServerConfig, host: str, insecure_bind: bool) -> None:
    """What must hold before serving HTTP: the configured tokens, and a bind that is safe."""
    if config.auth.mode == "tokens" and config.token_problems:
        raise ConfigErrors(list(config.token_problems))
    check_bind(host, insecure_bind, config.auth.authenticates)


async def serve_app_http(
    config: ServerConfig,
    app: App,
    listener: socket.socket,
    stop: anyio.Event,
    on_listening: Callable[[str, int], Awaitable[None]] | None = None,
    host: str | None = None,
) -> None:
    """Serve `app` over HTTP (/mcp, /healthz, /v1, /ui, /metrics) on `listener` until `stop` is
    set; `host` as the operator named it (--host), else the listener's address."""
    host = host or str(listener.getsockname()[0])
    async with (
        # The authorization server's keys and introspection; never a caller's token elsewhere.
        http_client(timeout=httpx2.Timeout(10.0), follow_redirects=False) as auth_http,
        anyio.create_task_group() as tg,
    ):
        server = await mcp_server(config, app, tg)
        auth = build_http_auth(config.auth, config.tokens, config.http.public_url, auth_http)
        # The page's sign-in discovers the authorization server with the same client.
        sign_in = build_ui_sign_in(config, auth_http)
        http_app = build_http_app(
            server, host, app.health, config.http, auth, _v1(config, app), _metrics(app), sign_in
        )
        uv = QuietUvicorn(
            uvicorn_config(
                http_app,
                config.http,
                multi_user=auth is not None,
            )
        )

        async def stop_when_asked() -> None:
            await stop.wait()
            uv.should_exit = True

        tg.start_soon(stop_when_asked)
        tg.start_soon(_announce, uv, listener, on_listening)
        await uv.serve(sockets=[listener])
        tg.cancel_scope.cancel()


def _metrics(app: App) -> MetricsSources:
    return MetricsSources(
        runtime=app.metrics,
        pending_interrupts=app.store.list_all_pending,
        database_counts=app.store.database_counts,
        downstream_connections=app.sources.open_connections,
        connection_errors=app.sources.connection_errors,
        webhook_counts=app.store.delivery_counts,
    )


def _v1(config: ServerConfig, app: App) -> V1Context:
    triggers = TriggerRoutes(config.triggers, app.store.find_started) if config.triggers else None
    http = config.http
    secure = (http.public_url or "").startswith("https:")
    oauth = OAuthRoutes(app.oauth, http.base_path, secure) if app.oauth is not None else None
    return V1Context(app.service, app.events, StreamSettings.of(http), triggers, http.base_path, oauth)


async def _announce(
    uv: uvicorn.Server, listener: socket.socket, on_listening: Callable[[str, int], Awaitable[None]] | None
) -> None:
    # uvicorn exposes only a flag for "listening"; there is no event to await.
    while not uv.started:  # noqa: ASYNC110
        await anyio.sleep(0.05)
    host, port = listener.getsockname()[:2]
    logger.info("listening on %s", http_url(host, port))
    logger.info("the page for people: %s", http_url(host, port).removesuffix("/mcp") + "/ui/")
    if on_listening is not None:
        await on_listening(host, port)
