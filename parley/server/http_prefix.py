"""Serving under a path prefix (`http.base_path`), behind a reverse proxy at e.g. /parley/.

A proxy may pass the prefix on (`/parley/v1/agents`) or strip it (`/v1/agents`); parley answers
both, so either proxy setup works with the same configuration. The prefix comes from the
configuration only, never from a request header (X-Forwarded-Prefix), so no caller can move a
route. The routes themselves keep their own paths; the page at /ui uses relative URLs only, so
the browser keeps the prefix it opened the page under.

The protected resource metadata (RFC 9728) keeps its path at the host's root:
`/.well-known/oauth-protected-resource/parley/mcp` for `https://host/parley/mcp`, which the
proxy passes on unchanged, as the RFC places it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


def strip_base_path(app: ASGIApp, base_path: str) -> ASGIApp:
    """`app`, answering a request under `base_path` as the same request without it."""
    if not base_path:
        return app
    prefix = base_path.encode()

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] in ("http", "websocket") else ""
        if path == base_path or path.startswith(base_path + "/"):
            raw = scope.get("raw_path")
            if isinstance(raw, bytes) and raw.startswith(prefix):
                raw = raw[len(prefix) :] or b"/"
            scope = {**scope, "path": path[len(base_path) :] or "/", "raw_path": raw}
        await app(scope, receive, send)

    return route
