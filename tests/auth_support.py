"""An authorization server for the tests (signing keys made per run, a JWKS and an RFC 7662
introspection endpoint served over loopback), tokens it signs, and MCP clients that send a
bearer token.

The server runs on a thread of the test process (the standard library's HTTP server), so a test
can rotate its keys or read what it was sent while parley (in the test's process or a
subprocess) fetches from it.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from parley.sdk_compat import create_mcp_http_client
from parley.tls import http_client
from tests.support import INITIALIZE, MCP_HEADERS, TEST_DEADLINE_S


@dataclass
class SigningKey:
    """A key pair the authorization server signs with, and its public JWK."""

    kid: str
    alg: str
    private: Any
    public_jwk: dict[str, Any]

    @classmethod
    def ec(cls, kid: str | None = None) -> SigningKey:
        private = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
        kid = kid or uuid.uuid4().hex[:12]
        return cls(kid, "ES256", private, {**jwk, "kid": kid, "alg": "ES256", "use": "sig"})

    @classmethod
    def rsa(cls, kid: str | None = None) -> SigningKey:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
        kid = kid or uuid.uuid4().hex[:12]
        return cls(kid, "RS256", private, {**jwk, "kid": kid, "alg": "RS256", "use": "sig"})

    def sign(self, claims: dict[str, Any], **header: Any) -> str:
        return jwt.encode(claims, self.private, algorithm=self.alg, headers={"kid": self.kid, **header})


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class AuthServer:
    """The organisation's authorization server as parley sees it: `/jwks.json` (the current
    keys), `/introspect` (answers from `introspected`), and anything else recorded and answered
    400 (a stand-in for a downstream server or a model provider that must never see a caller's
    token)."""

    keys: list[SigningKey] = field(default_factory=list)
    introspected: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""

    def jwks(self) -> dict[str, Any]:
        return {"keys": [k.public_jwk for k in self.keys]}

    def fetches(self, path: str = "/jwks.json") -> int:
        return sum(1 for r in self.requests if r.path == path)


@contextmanager
def auth_server(*keys: SigningKey) -> Iterator[AuthServer]:
    state = AuthServer(keys=list(keys))

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            return body

        def _json(self, status: int, value: Any) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._record()
            if self.path == "/jwks.json":
                self._json(200, state.jwks())
            else:
                self._json(404, {"error": "not_found"})

        def do_POST(self) -> None:
            body = self._record()
            if self.path == "/introspect":
                token = parse_qs(body.decode()).get("token", [""])[0]
                self._json(200, state.introspected.get(token, {"active": False}))
            else:
                self._json(
                    400, {"error": {"message": "this is not a real provider", "type": "invalid_request"}}
                )

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TEST_DEADLINE_S)


def claims(
    issuer: str, audience: str, subject: str, scope: str = "parley:use", **extra: Any
) -> dict[str, Any]:
    now = int(time.time())
    return {
        "iss": issuer,
        "aud": audience,
        "sub": subject,
        "scope": scope,
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "client_id": "test-client",
        **extra,
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def token_client(
    url: str, token: str | None, mode: str = "auto", **options: Any
) -> AsyncIterator[Client]:
    """The mcp SDK's client, sending `token` as a bearer token on every request."""
    headers = bearer(token) if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client,
    ):
        yield client


async def initialize(url: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    """A raw `initialize` POST, to see the status and headers an HTTP client gets."""
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        return await http.post(url, json=INITIALIZE, headers={**MCP_HEADERS, **(headers or {})})
