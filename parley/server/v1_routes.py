"""parley's own HTTP surface beside /mcp: the /v1 routes (same gate, same owners)."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from parley.server.ai_sdk_chat import ChatEndpoints
from parley.server.triggers import TriggerEndpoint
from parley.server.v1_accounts import AccountEndpoints
from parley.server.v1_api import JsonEndpoints
from parley.server.v1_common import V1Context
from parley.server.v1_events import OwnerStream, SessionStream
from parley.server.v1_schedules import ScheduleEndpoints


def v1_routes(ctx: V1Context) -> list[Route]:
    return [
        Route("/v1/sessions/{session_id}/events", SessionStream(ctx).endpoint, methods=["GET"]),
        Route("/v1/events", OwnerStream(ctx).endpoint, methods=["GET"]),
        *ChatEndpoints(ctx, ctx.streams.chat_agent).routes(),
        *JsonEndpoints(ctx).routes(),
        *([TriggerEndpoint(ctx.service, ctx.triggers).route()] if ctx.triggers is not None else []),
        *ScheduleEndpoints(ctx).routes(),
        *AccountEndpoints(ctx).routes(),
        *(ctx.oauth.v1_routes() if ctx.oauth is not None else []),
    ]


def v1_cors(app: ASGIApp, origins: Sequence[str]) -> ASGIApp:
    """CORS for /v1 only, for web apps served from `origins` (http.cors_origins) that call parley
    from the browser (useChat's fetch sends Authorization and JSON: a preflighted request)."""
    cors = CORSMiddleware(
        app,
        allow_origins=[o.rstrip("/") for o in origins],
        allow_methods=["GET", "POST"],
        allow_headers=["authorization", "content-type", "last-event-id"],
        expose_headers=["x-vercel-ai-ui-message-stream", "retry-after"],
        max_age=600,
    )

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            await cors(scope, receive, send)
        else:
            await app(scope, receive, send)

    return route
