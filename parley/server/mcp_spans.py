"""What parley adds to the mcp SDK's own span of each inbound MCP message (the SDK's
OpenTelemetryMiddleware makes it, with `mcp.method.name`, `jsonrpc.request.id` and `error.type`,
and joins the caller's trace from `params._meta`): the `mcp.session.id` of streamable HTTP."""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from opentelemetry import trace

SESSION_HEADER = "mcp-session-id"


async def mcp_session_on_span(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    span = trace.get_current_span()
    if span.is_recording():
        headers = getattr(ctx.request, "headers", None)
        session_id = headers.get(SESSION_HEADER) if headers is not None else None
        if session_id:
            span.set_attribute("mcp.session.id", session_id)
    return await call_next(ctx)
