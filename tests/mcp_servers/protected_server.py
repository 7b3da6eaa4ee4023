"""A protected MCP server for the per-principal credential tests: it knows one bearer token per
user, refuses any other request with 401, and records which user sent each tool call.

It runs in the test's process over streamable HTTP (`protected_in_process`); the record is the
test's evidence of whose credential reached it, so it is kept in memory, in arrival order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.testing.tools import served_over_http


@dataclass(frozen=True)
class Seen:
    """One request that passed the token check: whose it was and, for a tool call, which tool."""

    user: str
    method: str
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProtectedServer:
    tokens: dict[str, str]  # token -> user
    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    refused: int = 0

    def calls(self, tool: str | None = None) -> list[Seen]:
        return [s for s in self.seen if s.method == "tools/call" and (tool is None or s.tool == tool)]

    def guard(self, app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
            user = self.tokens.get(authorization.removeprefix("Bearer ")) if authorization else None
            if user is None:
                self.refused += 1
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unknown token"})
                return
            body, replay = await _read_body(receive)
            self._record(user, body)
            await app(scope, replay, send)

        return guarded

    def _record(self, user: str, body: bytes) -> None:
        try:
            message = json.loads(body) if body else None
        except ValueError:
            message = None
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return
        params = message.get("params") or {}
        if message["method"] == "tools/call":
            self.seen.append(Seen(user, "tools/call", params.get("name"), params.get("arguments") or {}))
        else:
            self.seen.append(Seen(user, message["method"]))


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a `receive` that hands it to the app as if unread."""
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = bool(message.get("more_body"))
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def build() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("protected", version="1.0")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def list_issues(project: str) -> str:
        """The open issues of a project."""
        return f"no open issues in {project}"

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False)
    )
    def label_issue(issue: str, label: str) -> str:
        """Put a label on an issue."""
        return f"labelled {issue} {label}"

    @server.resource("issues://summary", name="summary", description="How many issues are open")
    def summary() -> str:
        return "3 open issues"

    return server


@asynccontextmanager
async def protected_in_process(tokens: dict[str, str]) -> AsyncIterator[ProtectedServer]:
    protected = ProtectedServer(tokens)
    async with served_over_http(build(), protected.guard) as url:
        protected.url = url
        yield protected
