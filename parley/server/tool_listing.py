"""`tools/list` answered from its wire form, made once per protocol version.

Every new MCP client session lists the tools (the SDK's client does so before its first
`tools/call`, to check structured results against the output schemas). parley's listing is about
60 KB of JSON, and building it from the tool table (the handler's models, then the SDK's
validation of the result against the protocol version's schema, then its dump) cost about a
third of a new session's server CPU. The listing never changes while the process runs (the tool
table is built once; agents are not part of it), and what it looks like depends only on the
protocol version (the SDK's per-version surface, and the task support parley advertises to
2025-11-25 clients). So the first listing of each version is kept, and later ones are copies of
it. A listing asked for with a cursor goes through as before (parley's fits on one page).
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

LIST_TOOLS = "tools/list"


class ToolListingCache:
    """A server middleware: the first uncursored `tools/list` of each protocol version is
    computed by the rest of the chain and kept; later ones are answered with a copy of it."""

    def __init__(self) -> None:
        self._by_version: dict[str, dict[str, Any]] = {}

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != LIST_TOOLS or ctx.request_id is None or (ctx.params or {}).get("cursor") is not None:
            return await call_next(ctx)
        version = ctx.protocol_version
        kept = self._by_version.get(version)
        if kept is None:
            result = await call_next(ctx)
            if not isinstance(result, dict):
                return result
            kept = self._by_version.setdefault(version, result)
        # A new top-level dict each time: the SDK copies it again before it goes on the wire, and
        # nothing after this middleware changes the tools inside it.
        return dict(kept)
