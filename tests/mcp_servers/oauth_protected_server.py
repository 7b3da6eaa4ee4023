"""A protected MCP server that accepts the JWT access tokens of the tests' authorization server
(tests/oauth_server.py) issued for its own URL, and records which user (`sub`) sent each request.

Without a valid token it answers 401 with `WWW-Authenticate: Bearer resource_metadata=...`, and
serves its Protected Resource Metadata (RFC 9728) there, as the MCP authorization specification
asks; a token without the scope a tool needs gets 403 `insufficient_scope`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
from jwt.algorithms import ECAlgorithm
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from parley.testing.tools import served_over_http
from tests.mcp_servers.protected_server import Seen, _read_body, build

PRM_PATH = "/.well-known/oauth-protected-resource/mcp"


@dataclass
class OAuthProtectedServer:
    issuer: str
    public_jwk: dict[str, Any]
    scope: str = "tracker:read"
    # A tool whose call needs this scope as well (for step-up).
    wider: dict[str, str] = field(default_factory=dict)
    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    refused: int = 0
    tokens_seen: set[str] = field(default_factory=set)
    # Access tokens the server no longer accepts (as if revoked at the authorization server).
    revoked: set[str] = field(default_factory=set)

    @property
    def origin(self) -> str:
        return self.url.removesuffix("/mcp")

    def calls(self, tool: str | None = None) -> list[Seen]:
        return [s for s in self.seen if s.method == "tools/call" and (tool is None or s.tool == tool)]

    def claims(self, authorization: str) -> dict[str, Any] | None:
        token = authorization.removeprefix("Bearer ")
        if not authorization.startswith("Bearer ") or not token or token in self.revoked:
            return None
        key = ECAlgorithm.from_jwk(json.dumps(self.public_jwk))
        try:
            return dict(
                jwt.decode(token, key, algorithms=["ES256"], audience=self.url, issuer=self.issuer)  # type: ignore[arg-type]
            )
        except jwt.InvalidTokenError:
            return None

    async def _send(self, send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def guard(self, app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            if scope["path"] == PRM_PATH:
                document = {
                    "resource": self.url,
                    "authorization_servers": [self.issuer],
                    "scopes_supported": [self.scope],
                }
                await self._send(
                    send, 200, json.dumps(document).encode(), [(b"content-type", b"application/json")]
                )
                return
            authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
            claims = self.claims(authorization)
            if claims is None:
                self.refused += 1
                challenge = f'Bearer resource_metadata="{self.origin}{PRM_PATH}", scope="{self.scope}"'
                await self._send(send, 401, b"", [(b"www-authenticate", challenge.encode())])
                return
            body, replay = await _read_body(receive)
            message = _message(body)
            granted = set(str(claims.get("scope", "")).split())
            needed = self.wider.get(str(message.get("params", {}).get("name"))) if message else None
            if needed is not None and needed not in granted:
                challenge = f'Bearer error="insufficient_scope", scope="{self.scope} {needed}"'
                await self._send(send, 403, b"", [(b"www-authenticate", challenge.encode())])
                return
            self.tokens_seen.add(authorization.removeprefix("Bearer "))
            if message is not None:
                params = message.get("params") or {}
                if message["method"] == "tools/call":
                    self.seen.append(
                        Seen(claims["sub"], "tools/call", params.get("name"), params.get("arguments") or {})
                    )
                else:
                    self.seen.append(Seen(claims["sub"], message["method"]))
            await app(scope, replay, send)

        return guarded


def _message(body: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(body) if body else None
    except ValueError:
        return None
    return message if isinstance(message, dict) and isinstance(message.get("method"), str) else None


@asynccontextmanager
async def oauth_protected_in_process(
    issuer: str,
    public_jwk: dict[str, Any],
    scope: str = "tracker:read",
    wider: dict[str, str] | None = None,
    server: MCPServer[Any] | None = None,
) -> AsyncIterator[OAuthProtectedServer]:
    """`server`: the MCP server behind the check (default: the issue tracker of protected_server)."""
    protected = OAuthProtectedServer(issuer, public_jwk, scope, dict(wider or {}))
    async with served_over_http(server or build(), protected.guard) as url:
        protected.url = url
        yield protected
