"""Finding a protected MCP server's authorization server, as the MCP authorization specification
says: the Protected Resource Metadata (RFC 9728) that a 401's WWW-Authenticate names in
`resource_metadata`, else the well-known URLs beside the server's; then the authorization
server's metadata (RFC 8414), else OpenID Connect discovery. What is found is checked: the same
issuer exactly, the code flow, PKCE with S256."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
from pydantic import BaseModel, ConfigDict, ValidationError

from parley.errors import OAuthClientError

DISCOVERY_TIMEOUT_S = 10.0
MAX_DOCUMENT_BYTES = 256 * 1024
_PARAM = re.compile(r'([A-Za-z_]+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


class ResourceMetadata(BaseModel):
    """The fields of RFC 9728 metadata parley uses."""

    model_config = ConfigDict(extra="ignore")

    resource: str | None = None
    authorization_servers: list[str] = []
    scopes_supported: list[str] = []


class ServerMetadata(BaseModel):
    """The fields of RFC 8414 (or OpenID Connect) metadata parley uses."""

    model_config = ConfigDict(extra="ignore")

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None = None
    response_types_supported: list[str] = ["code"]
    code_challenge_methods_supported: list[str] = []
    token_endpoint_auth_methods_supported: list[str] = ["client_secret_basic"]
    client_id_metadata_document_supported: bool = False
    authorization_response_iss_parameter_supported: bool = False


@dataclass(frozen=True, slots=True)
class Discovered:
    """A downstream server's authorization, as discovered: the resource its tokens are for, the
    scopes it lists, and its authorization server's metadata."""

    resource: str
    scopes: tuple[str, ...]
    server: ServerMetadata

    @property
    def issuer(self) -> str:
        return self.server.issuer


def challenge_params(header: str | None) -> dict[str, str]:
    """The parameters of a `Bearer` WWW-Authenticate challenge (resource_metadata, scope, error)."""
    if not header or not header.strip().lower().startswith("bearer"):
        return {}
    return {
        m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
        for m in _PARAM.finditer(header)
    }


def _well_known(url: str, name: str, with_path: bool = True) -> str:
    parts = urlsplit(url)
    path = parts.path.rstrip("/") if with_path else ""
    return urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{name}{path}", "", ""))


async def _document(http: httpx2.AsyncClient, url: str) -> dict[str, Any] | None:
    """A JSON object at `url`, or None when it is not there (404 and such)."""
    try:
        response = await http.get(url, headers={"Accept": "application/json"})
    except httpx2.HTTPError as exc:
        raise OAuthClientError(f"cannot reach {url}: {type(exc).__name__}") from None
    if response.status_code != 200 or len(response.content) > MAX_DOCUMENT_BYTES:
        return None
    try:
        value = response.json()
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _web_url(url: str) -> bool:
    """https, or http to a loopback address only (a person's browser is sent to these)."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.netloc:
        return True
    return parts.scheme == "http" and (parts.hostname or "") in ("127.0.0.1", "localhost", "::1")


def _same_resource(resource: str, server_url: str) -> bool:
    """RFC 9728 §3.3: the metadata's resource is the server's URL, or a prefix of it on its origin."""
    a, b = urlsplit(resource), urlsplit(server_url)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc) and b.path.startswith(a.path.rstrip("/"))


async def protected_resource(
    http: httpx2.AsyncClient, server_url: str, challenge: dict[str, str]
) -> ResourceMetadata:
    urls = [challenge["resource_metadata"]] if challenge.get("resource_metadata") else []
    urls += [
        _well_known(server_url, "oauth-protected-resource"),
        _well_known(server_url, "oauth-protected-resource", False),
    ]
    for url in urls:
        document = await _document(http, url)
        if document is None:
            continue
        try:
            metadata = ResourceMetadata.model_validate(document)
        except ValidationError:
            continue
        if metadata.resource is not None and not _same_resource(metadata.resource, server_url):
            raise OAuthClientError(
                f"the protected resource metadata at {url} is for {metadata.resource}, not for {server_url}"
            )
        if metadata.authorization_servers:
            return metadata
    raise OAuthClientError(f"{server_url} names no authorization server (no protected resource metadata)")


def _metadata_urls(issuer: str) -> list[str]:
    """RFC 8414 §3.1 and OpenID Connect discovery, in the order the MCP specification gives."""
    if urlsplit(issuer).path.strip("/"):
        return [
            _well_known(issuer, "oauth-authorization-server"),
            _well_known(issuer, "openid-configuration"),
            issuer.rstrip("/") + "/.well-known/openid-configuration",
        ]
    return [_well_known(issuer, "oauth-authorization-server"), _well_known(issuer, "openid-configuration")]


async def authorization_server(http: httpx2.AsyncClient, issuer: str) -> ServerMetadata:
    for url in _metadata_urls(issuer):
        document = await _document(http, url)
        if document is None:
            continue
        try:
            metadata = ServerMetadata.model_validate(document)
        except ValidationError as exc:
            raise OAuthClientError(f"the metadata at {url} is incomplete: {exc.errors()[0]['loc']}") from None
        for endpoint in (
            metadata.authorization_endpoint,
            metadata.token_endpoint,
            metadata.registration_endpoint,
        ):
            if endpoint is not None and not _web_url(endpoint):
                raise OAuthClientError(
                    f"the metadata at {url} names an endpoint that is not https: {endpoint[:100]}"
                )
        if metadata.issuer != issuer:
            raise OAuthClientError(f"the metadata at {url} names issuer {metadata.issuer}, not {issuer}")
        if "code" not in metadata.response_types_supported:
            raise OAuthClientError(f"{issuer} does not offer the authorization code flow")
        if "S256" not in metadata.code_challenge_methods_supported:
            # The MCP specification: a client must not go on without PKCE S256.
            raise OAuthClientError(f"{issuer} does not say it supports PKCE with S256")
        return metadata
    raise OAuthClientError(f"no authorization server metadata found for {issuer}")


async def discover(http: httpx2.AsyncClient, server_url: str) -> Discovered:
    """The server's authorization: an unauthenticated request first, for its 401's challenge."""
    try:
        probe = await http.post(
            server_url,
            json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
        )
    except httpx2.HTTPError as exc:
        raise OAuthClientError(f"cannot reach {server_url}: {type(exc).__name__}") from None
    challenge = challenge_params(probe.headers.get("www-authenticate")) if probe.status_code == 401 else {}
    resource = await protected_resource(http, server_url, challenge)
    metadata = await authorization_server(http, resource.authorization_servers[0])
    # The scope the 401 asks for comes first (the MCP specification), then what the metadata lists.
    scopes = challenge["scope"].split() if challenge.get("scope") else resource.scopes_supported
    return Discovered(
        resource=resource.resource or server_url,
        scopes=tuple(scopes),
        server=metadata,
    )
