"""DNS-rebinding protection, on every route.

The SDK's check runs only on /mcp and matches allowed Origins by prefix, so
`http://localhost:8765.evil.com` passed and /healthz skipped the Host check. Here the Host
must be exactly one of the loopback names with the port the request arrived on, or one of the
names configured in `http.allowed_hosts` (and the host of `http.public_url`), as written; an
Origin, when present, must be exactly `http://` plus a loopback Host, or `http://` or
`https://` plus a configured one. The loopback names include the address parley is bound to
when that is another loopback address (`--host 127.0.0.2`). The origins of web apps allowed to
call /v1 (`http.cors_origins`) pass on /v1 only: /mcp and the rest accept only parley's own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# The routes web apps elsewhere may call (http.cors_origins).
WEB_APP_PREFIX = "/v1/"


def _host_form(address: str) -> str:
    """An address as it appears in a Host header: `::1` -> `[::1]`."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


class HostGuard:
    """`extra_hosts`: Host values accepted besides loopback (matched case-insensitively, exactly
    as configured: `parley.example.com` or `parley.example.com:8443`); `bound`: the loopback
    address parley listens on, if it is not one of the usual names."""

    def __init__(
        self,
        app: ASGIApp,
        extra_hosts: Sequence[str] = (),
        web_origins: Sequence[str] = (),
        bound: str | None = None,
    ) -> None:
        self._app = app
        self._extra = frozenset(h.lower() for h in extra_hosts)
        self._loopback = LOOPBACK_HOSTS + ((_host_form(bound).lower(),) if bound else ())
        self._extra_origins = frozenset(
            f"{scheme}://{h}" for h in self._extra for scheme in ("http", "https")
        )
        # `web_origins`: pages elsewhere allowed to call /v1 (http.cors_origins), as written.
        self._web_origins = frozenset(o.lower().rstrip("/") for o in web_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        server = scope.get("server")
        port = server[1] if server else None
        loopback = {f"{name}:{port}" for name in self._loopback}
        if port == 80:
            loopback |= set(self._loopback)
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
        if origin is not None and not self._origin_allowed(origin.lower(), loopback, scope["path"]):
            logger.warning("refused a request with Origin %r", origin[:100])
            await PlainTextResponse(
                f"Invalid Origin header {origin[:100]!r}: parley accepts requests only from pages served by "
                "itself (protection against DNS rebinding)",
                status_code=403,
            )(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _origin_allowed(self, origin: str, loopback: set[str], path: str) -> bool:
        if origin in {f"http://{h}" for h in loopback} or origin in self._extra_origins:
            return True
        return path.startswith(WEB_APP_PREFIX) and origin in self._web_origins
