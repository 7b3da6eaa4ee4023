"""The bearer gate in front of every HTTP route when `auth` is `tokens` or `oauth`.

- `/mcp` (and anything not listed below) needs a valid token with `parley:use` or
  `parley:admin`: without one, 401 with a `WWW-Authenticate: Bearer` challenge (in `oauth` mode
  naming the protected resource metadata, RFC 9728, and the scope); with a valid token that
  lacks the scope, 403 `insufficient_scope` with the `scope` needed (the SDK's gate leaves that
  parameter out);
- `/healthz` is open; a token with `parley:metrics` (or `parley:admin`) gets the full report;
- `/metrics` needs a valid token with `parley:metrics` (or `parley:admin`): 401 without one,
  403 `insufficient_scope` naming `parley:metrics` with a token that lacks it;
- `/.well-known/oauth-protected-resource` (and the path-inserted form for the resource's path)
  is open, in `oauth` mode only: in `tokens` mode there is no authorization server to name.

An accepted token becomes the SDK's `AuthenticatedUser` in the ASGI scope and its access token
in `get_access_token()`'s context, so the SDK binds each MCP transport session to its principal
(another principal's requests on it get 404) and tools read the caller with `caller_of`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.middleware.auth_context import auth_context_var, get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from parley.config import secret_from_env
from parley.config.auth import AuthConfig, TokenEntry
from parley.runtime.access import ADMIN, LOCAL_PRINCIPAL, METRICS, SCOPES, USE, Principal
from parley.server.auth_tokens import BearerVerifier, Refusal, StaticTokenVerifier, principal_of
from parley.server.http_limits import announces_body

logger = logging.getLogger(__name__)

WELL_KNOWN = "/.well-known/oauth-protected-resource"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
# POST /v1/triggers/{name}: a token with the trigger's scope alone may call it (the route checks it).
TRIGGERS_PREFIX = "/v1/triggers/"
# What /mcp needs (either), and what the full /healthz report needs (either).
MCP_SCOPES = (USE, ADMIN)
HEALTH_SCOPES = (METRICS, ADMIN)


def caller_of(ctx: Any) -> Principal:
    """The principal of the request being served: from its bearer token, else the local user
    (stdio, and HTTP with `auth: none`); for the audit, with the MCP client it came through."""
    token = get_access_token()
    who = principal_of(token) if token is not None else LOCAL_PRINCIPAL
    return who.with_client(_client_name(ctx))


def _client_name(ctx: Any) -> str | None:
    """The MCP client's name and version, as it announced them (what the audit can tell of a
    client when no OAuth client is named)."""
    try:
        info = ctx.session.client_params.client_info
    except (AttributeError, ValueError):
        return None
    name = getattr(info, "name", None)
    if not isinstance(name, str) or not name:
        return None
    version = getattr(info, "version", None)
    return f"{name[:100]} {version[:40]}" if isinstance(version, str) and version else name[:100]


def health_is_full(scope: Scope) -> bool:
    """Whether this /healthz request may see the full report."""
    auth = scope.get("auth")
    return isinstance(auth, AuthCredentials) and any(s in auth.scopes for s in HEALTH_SCOPES)


@dataclass(frozen=True, slots=True)
class Challenge:
    """How a refusal is worded: `metadata_url` (oauth) points clients at the authorization server."""

    metadata_url: str | None = None

    def header(
        self, error: str | None = None, description: str | None = None, scope: str | None = None
    ) -> str:
        parts = [] if self.metadata_url else ['realm="parley"']
        if error:
            parts.append(f'error="{error}"')
        if description:
            parts.append(f'error_description="{_quoted(description)}"')
        if scope:
            parts.append(f'scope="{scope}"')
        if self.metadata_url:
            parts.append(f'resource_metadata="{self.metadata_url}"')
        return "Bearer " + ", ".join(parts)


def _quoted(text: str) -> str:
    return "".join(c for c in text if c not in '"\\' and c.isprintable())


class BearerGate:
    def __init__(
        self,
        app: ASGIApp,
        verifier: BearerVerifier,
        challenge: Challenge,
        open_paths: frozenset[str] = frozenset(),
    ) -> None:
        self._app = app
        self._verifier = verifier
        self._challenge = challenge
        self._open = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self._app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        if scope["path"] == HEALTH_PATH:
            # Open to all; a good token only widens the report.
            checked = await self._verify(header) if header else None
            if isinstance(checked, AccessToken):
                await self._run_as(checked, scope, receive, send)
            else:
                await self._app(scope, receive, send)
            return
        if header is None:
            await self._refuse(scope, send, 401, "invalid_token", None, "Authentication required")
            return
        checked = await self._verify(header)
        if isinstance(checked, Refusal):
            logger.info("refused a request to %s: %s", scope["path"][:100], checked.description)
            await self._refuse(
                scope, send, checked.status, checked.error, checked.description, checked.description
            )
            return
        if scope["path"] == METRICS_PATH:
            if not any(s in checked.scopes for s in HEALTH_SCOPES):
                description = f"The access token lacks the scope {METRICS} (or {ADMIN}) /metrics requires."
                await self._refuse(
                    scope, send, 403, "insufficient_scope", description, description, scope=METRICS
                )
                return
        elif not scope["path"].startswith(TRIGGERS_PREFIX) and not any(
            s in checked.scopes for s in MCP_SCOPES
        ):
            logger.info(
                "refused %s a request to %s: no parley:use scope", checked.client_id, scope["path"][:100]
            )
            description = f"The access token lacks the scope {USE} (or {ADMIN}) this server requires."
            await self._refuse(scope, send, 403, "insufficient_scope", description, description, scope=USE)
            return
        await self._run_as(checked, scope, receive, send)

    async def _verify(self, header: str) -> AccessToken | Refusal:
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            return Refusal(
                "The Authorization header must be 'Bearer' followed by the access token.",
                error="invalid_request",
            )
        return await self._verifier.check(token)

    async def _run_as(self, access: AccessToken, scope: Scope, receive: Receive, send: Send) -> None:
        user = AuthenticatedUser(access)
        scope["user"] = user
        scope["auth"] = AuthCredentials(access.scopes)
        reset = auth_context_var.set(user)
        try:
            await self._app(scope, receive, send)
        finally:
            auth_context_var.reset(reset)

    async def _refuse(
        self,
        request: Scope,
        send: Send,
        status: int,
        error: str,
        description: str | None,
        body_description: str,
        scope: str | None = None,
    ) -> None:
        """The error response; `description` None: no credentials were sent at all."""
        if description is None:
            # No credentials at all: the challenge names no error (RFC 6750 §3.1).
            www = self._challenge.header(scope=USE if self._challenge.metadata_url else None)
        else:
            www = self._challenge.header(
                error, description, scope or (USE if self._challenge.metadata_url else None)
            )
        body = json.dumps({"error": error, "error_description": body_description}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", www.encode()),
            (b"cache-control", b"no-store"),
        ]
        if status == 503:
            headers.append((b"retry-after", b"5"))
        if announces_body(request):
            # Refused on its headers: its body is never read, so the connection cannot carry
            # another request (and a client trickling a body holds nothing).
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def metadata_url(public_url: str) -> str:
    """Where the protected resource metadata of `public_url` is (RFC 9728 §3.1)."""
    return str(build_resource_metadata_url(AnyHttpUrl(public_url)))


def metadata_routes(public_url: str, authorization_servers: list[str]) -> tuple[list[Route], frozenset[str]]:
    """The RFC 9728 document, at the path-inserted URL of the resource and at the bare well-known
    path (clients try both); returns the routes and their paths."""
    # Validated from strings, so the model keeps a path-less URL as written (an issuer is
    # compared exactly: RFC 8414; AnyHttpUrl on its own would add a trailing slash).
    metadata = ProtectedResourceMetadata.model_validate(
        {
            "resource": public_url,
            "authorization_servers": authorization_servers,
            "scopes_supported": list(SCOPES),
            "bearer_methods_supported": ["header"],
            "resource_name": "parley",
        }
    )
    handler = ProtectedResourceMetadataHandler(metadata)
    paths = {WELL_KNOWN, urlsplit(metadata_url(public_url)).path}
    return [Route(path, handler.handle, methods=["GET"]) for path in sorted(paths)], frozenset(paths)


@dataclass(frozen=True, slots=True)
class HttpAuth:
    """What `build_http_app` needs to authenticate: the verifier, how refusals are worded, and
    the open metadata routes (oauth only)."""

    verifier: BearerVerifier
    challenge: Challenge
    routes: list[Route]
    open_paths: frozenset[str]


def build_http_auth(
    auth: AuthConfig, tokens: Sequence[TokenEntry], public_url: str | None, http: httpx2.AsyncClient
) -> HttpAuth | None:
    """The HTTP authentication `auth` configures (None for `auth: none`); `http` fetches keys and
    asks the introspection endpoint."""
    if auth.mode == "tokens":
        return HttpAuth(StaticTokenVerifier(tokens), Challenge(), [], frozenset())
    if auth.mode == "oauth":
        oauth = auth.oauth
        assert oauth is not None and public_url is not None  # the configuration was checked
        secret = secret_from_env(oauth.introspection.client_secret_env) if oauth.introspection else None
        # Imported here: JWT and its cryptography cost ~2 MiB of memory a server without OAuth
        # does not need.
        from parley.server.auth_oauth import OAuthVerifier

        verifier = OAuthVerifier(oauth, public_url, http, introspection_secret=secret)
        routes, paths = metadata_routes(public_url, [oauth.issuer])
        return HttpAuth(verifier, Challenge(metadata_url(public_url)), routes, paths)
    return None
