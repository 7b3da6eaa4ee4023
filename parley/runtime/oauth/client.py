"""The OAuth client's requests to an authorization server (httpx2): registration (a
pre-registered client, a Client ID Metadata Document parley serves, or RFC 7591 dynamic
registration), the authorization URL with PKCE S256, `state` and `resource` (RFC 8707), and the
token endpoint's code exchange and refresh. Tokens pass through here in memory only."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote, urlencode

import httpx2
from pydantic import BaseModel, ConfigDict, ValidationError

from parley.config.mcp_auth import UserOAuthConfig
from parley.errors import OAuthClientError
from parley.runtime.oauth.discovery import Discovered

TOKEN_TIMEOUT_S = 15.0
CLIENT_NAME = "parley"


def pkce_pair() -> tuple[str, str]:
    """A PKCE verifier (43 characters from 32 random bytes) and its S256 challenge."""
    verifier = secrets.token_urlsafe(32)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """How parley identifies itself to one authorization server."""

    client_id: str
    secret: str | None = field(default=None, repr=False)
    # client_secret_basic, client_secret_post or none.
    auth_method: str = "none"


class TokenResponse(BaseModel):
    """A token endpoint's answer (RFC 6749 §5.1); the repr never shows the tokens."""

    model_config = ConfigDict(extra="ignore", hide_input_in_errors=True)

    access_token: str
    token_type: str = "Bearer"
    expires_in: float | None = None
    refresh_token: str | None = None
    scope: str | None = None

    def __repr__(self) -> str:
        return f"TokenResponse(token_type={self.token_type!r}, expires_in={self.expires_in!r}, scope={self.scope!r})"

    def expires_at(self, now: float) -> float | None:
        return None if self.expires_in is None else now + float(self.expires_in)


def client_metadata(public_base: str) -> dict[str, object]:
    """parley's Client ID Metadata Document: its URL is the client id."""
    return {
        "client_id": metadata_document_url(public_base),
        "client_name": CLIENT_NAME,
        "client_uri": public_base,
        "redirect_uris": [callback_url(public_base)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }


def metadata_document_url(public_base: str) -> str:
    return f"{public_base}/oauth/client-metadata.json"


def callback_url(public_base: str) -> str:
    return f"{public_base}/oauth/callback"


class RegisteredClients(Protocol):
    """Where the clients parley registered dynamically are kept (the store's oauth_clients)."""

    async def registered_client(self, server: str, issuer: str) -> str | None: ...

    async def keep_registered_client(self, server: str, issuer: str, client_id: str, now: float) -> str: ...


@dataclass(frozen=True, slots=True)
class Registration:
    """Where a dynamic registration is kept: the server it is for, the store, the clock."""

    server: str
    clients: RegisteredClients | None
    now: float
    # Whether parley has a public URL: without one (its links are on 127.0.0.1) no authorization
    # server can fetch its metadata document.
    public: bool = True


async def register(
    http: httpx2.AsyncClient,
    config: UserOAuthConfig,
    found: Discovered,
    public_base: str,
    kept: Registration | None = None,
) -> ClientIdentity:
    """The client identity for this server, by the configured method (auto: pre-registered when
    a client id is given, else the metadata document when the server supports it, else dynamic:
    the client registered before, kept in `kept`, or a new one)."""
    method = config.registration
    if method == "auto":
        if config.client_id is not None:
            method = "pre_registered"
        elif found.server.client_id_metadata_document_supported and (kept is None or kept.public):
            method = "metadata_document"
        else:
            method = "dynamic"
    if method == "pre_registered":
        assert config.client_id is not None
        secret = os.environ.get(config.client_secret_env) if config.client_secret_env else None
        if config.client_secret_env and not secret:
            raise OAuthClientError(
                f"environment variable {config.client_secret_env} (the client secret) is not set"
            )
        return ClientIdentity(config.client_id, secret, "client_secret_basic" if secret else "none")
    if method == "metadata_document":
        if not found.server.client_id_metadata_document_supported:
            raise OAuthClientError(f"{found.issuer} does not support Client ID Metadata Documents")
        return ClientIdentity(metadata_document_url(public_base))
    clients = kept.clients if kept is not None else None
    if kept is not None and clients is not None:
        known = await clients.registered_client(kept.server, found.issuer)
        if known is not None:
            return ClientIdentity(known)
    identity = await _register_dynamically(http, found, public_base)
    if kept is None or clients is None or identity.secret is not None:
        # A confidential client's secret is not stored: it is registered again after a restart.
        return identity
    client_id = await clients.keep_registered_client(kept.server, found.issuer, identity.client_id, kept.now)
    return ClientIdentity(client_id)


async def _register_dynamically(
    http: httpx2.AsyncClient, found: Discovered, public_base: str
) -> ClientIdentity:
    endpoint = found.server.registration_endpoint
    if endpoint is None:
        raise OAuthClientError(
            f"{found.issuer} has no registration endpoint: give mcp_servers.*.auth.client_id (pre-registered)"
        )
    body = client_metadata(public_base)
    del body["client_id"]
    try:
        response = await http.post(endpoint, json=body, timeout=TOKEN_TIMEOUT_S)
        data = response.json() if response.status_code in (200, 201) else None
    except (httpx2.HTTPError, ValueError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("client_id"), str):
        raise OAuthClientError(f"dynamic registration at {endpoint} failed")
    secret = data.get("client_secret") if isinstance(data.get("client_secret"), str) else None
    return ClientIdentity(data["client_id"], secret, "client_secret_basic" if secret else "none")


def authorization_url(
    found: Discovered,
    identity: ClientIdentity,
    public_base: str,
    scopes: tuple[str, ...],
    state: str,
    challenge: str,
) -> str:
    params = {
        "response_type": "code",
        "client_id": identity.client_id,
        "redirect_uri": callback_url(public_base),
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": found.resource,
    }
    if scopes:
        params["scope"] = " ".join(scopes)
    endpoint = found.server.authorization_endpoint
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"


async def _token_request(
    http: httpx2.AsyncClient, found: Discovered, identity: ClientIdentity, form: dict[str, str]
) -> TokenResponse:
    form = {**form, "resource": found.resource}
    headers = {"Accept": "application/json"}
    if identity.secret is not None and identity.auth_method == "client_secret_basic":
        basic = base64.b64encode(f"{quote(identity.client_id)}:{quote(identity.secret)}".encode()).decode()
        headers["Authorization"] = f"Basic {basic}"
    elif identity.secret is not None:
        form |= {"client_id": identity.client_id, "client_secret": identity.secret}
    else:
        form["client_id"] = identity.client_id
    try:
        response = await http.post(
            found.server.token_endpoint,
            data=form,
            headers=headers,
            timeout=TOKEN_TIMEOUT_S,
        )
    except httpx2.HTTPError as exc:
        raise OAuthClientError(
            f"cannot reach the token endpoint of {found.issuer}: {type(exc).__name__}"
        ) from None
    if response.status_code != 200:
        error = _error_code(response)
        raise OAuthClientError(
            f"the token endpoint of {found.issuer} refused ({response.status_code} {error})"
        )
    try:
        token = TokenResponse.model_validate_json(response.content)
    except ValidationError:
        raise OAuthClientError(
            f"the token endpoint of {found.issuer} answered without an access token"
        ) from None
    if token.token_type.lower() != "bearer":
        raise OAuthClientError(f"{found.issuer} issued a {token.token_type} token, not a bearer token")
    return token


def _error_code(response: httpx2.Response) -> str:
    """The OAuth error code of a refusal (never its description, which may echo input)."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return "no error code"
    return str(error)[:60] if isinstance(error, str) else "no error code"


async def exchange_code(
    http: httpx2.AsyncClient,
    found: Discovered,
    identity: ClientIdentity,
    public_base: str,
    code: str,
    verifier: str,
) -> TokenResponse:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": callback_url(public_base),
        "code_verifier": verifier,
    }
    return await _token_request(http, found, identity, form)


async def refresh(
    http: httpx2.AsyncClient, found: Discovered, identity: ClientIdentity, refresh_token: str
) -> TokenResponse:
    return await _token_request(
        http, found, identity, {"grant_type": "refresh_token", "refresh_token": refresh_token}
    )
