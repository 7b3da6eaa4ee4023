"""DNS-rebinding protection for a loopback bind, on every route.

The SDK's check runs only on /mcp and matches allowed Origins by prefix, so
`http://localhost:8765.evil.com` passed and /healthz skipped the Host check. Here the Host
must be exactly one of the loopback names with the port the request arrived on, and an
Origin, when present, exactly `http://` plus such a Host.
"""

from __future__ import annotations

import logging

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class LoopbackHostGuard:
    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        server = scope.get("server")
        port = server[1] if server else None
        allowed_hosts = {f"{name}:{port}" for name in LOOPBACK_HOSTS}
        if port == 80:
            allowed_hosts |= set(LOOPBACK_HOSTS)
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if host.lower() not in allowed_hosts:
            logger.warning("refused a request with Host %r", host[:100])
            await PlainTextResponse(
                f"Invalid Host header {host[:100]!r}: parley on a loopback address answers only "
                f"{', '.join(sorted(allowed_hosts))} (protection against DNS rebinding)",
                status_code=421,
            )(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in {f"http://{h}" for h in allowed_hosts}:
            logger.warning("refused a request with Origin %r", origin[:100])
            await PlainTextResponse(
                f"Invalid Origin header {origin[:100]!r}: parley on a loopback address accepts requests "
                "only from pages served by itself (protection against DNS rebinding)",
                status_code=403,
            )(scope, receive, send)
            return
        await self._app(scope, receive, send)
