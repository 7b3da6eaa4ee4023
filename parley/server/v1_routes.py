"""parley's own HTTP surface beside /mcp: the /v1 routes (same gate, same owners)."""

from __future__ import annotations

from starlette.routing import Route

from parley.server.ai_sdk_chat import ChatEndpoints
from parley.server.v1_api import JsonEndpoints
from parley.server.v1_common import V1Context
from parley.server.v1_events import OwnerStream, SessionStream


def v1_routes(ctx: V1Context) -> list[Route]:
    return [
        Route("/v1/sessions/{session_id}/events", SessionStream(ctx).endpoint, methods=["GET"]),
        Route("/v1/events", OwnerStream(ctx).endpoint, methods=["GET"]),
        *ChatEndpoints(ctx, ctx.streams.chat_agent).routes(),
        *JsonEndpoints(ctx).routes(),
    ]
