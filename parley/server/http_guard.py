"""DNS-rebinding protection, on every route.

The SDK's check runs only on /mcp and matches allowed Origins by prefix, so
`http://localhost:8765.evil.com` passed and /healthz skipped the Host check. Here the Host
must be exactly one of the loopback names with the port the request arrived on, or one of the
names configured in `http.allowed_hosts` (and the host of `http.public_url`), as written; an
Origin, when present, must be exactly `http://` plus a loopback Host, or `http://` or
`https://` plus a configured one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class HostGuard:
    """`extra_hosts`: Host values accepted besides loopback (matched case-insensitively, exactly
    as configured: `parley.example.com` or `parley.example.com:8443`)."""

    def __init__(
        self, app: ASGIApp, extra_hosts: Sequence[str] = (), web_origins: Sequence[str] = ()
    ) -> None:
        self._app = app
        self._extra = frozenset(h.lower() for h in extra_hosts)
        # `web_origins`: pages elsewhere allowed to call /v1 (http.cors_origins), as written.
        self._extra_origins = frozenset(
            f"{scheme}://{h}" for h in self._extra for scheme in ("http", "https")
        ) | frozenset(o.lower().rstrip("/") for o in web_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        server = scope.get("server")
        port = server[1] if server else None
        loopback = {f"{name}:{port}" for name in LOOPBACK_HOSTS}
        if port == 80:
            loopback |= set(LOOPBACK_HOSTS)
        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        if host not in loopback and host not in self._extra:
            logger.warning("refused a request with Host %r", host[:100])
            named = ", ".join(sorted(loopback | self._extra))
            await PlainTextResponse(
                f"Invalid Host header {host[:100]!r}: this parley answers only {named} (protection against "
                "DNS rebinding; add the name to http.allowed_hosts in parley.yaml to serve it)",
                status_code=421,
            )(scope, receive, send)
            return
        origin = headers.get("origin")
        if (
            origin is not None
            and origin.lower() not in {f"http://{h}" for h in loopback}
            and origin.lower() not in self._extra_origins
        ):
            logger.warning("refused a request with Origin %r", origin[:100])
            await PlainTextResponse(
                f"Invalid Origin header {origin[:100]!r}: parley accepts requests only from pages served by "
                "itself (protection against DNS rebinding)",
                status_code=403,
            )(scope, receive, send)
            return
        await self._app(scope, receive, send)
