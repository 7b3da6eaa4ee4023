"""Sign-in for the page at /ui with `auth: oauth` and `ui.client_id`: what the page needs to run
the authorization code flow with PKCE itself, as a public client.

parley discovers the authorization server's metadata (RFC 8414, then OpenID Connect discovery)
for the configured issuer, checks it (the same issuer exactly, the code flow, PKCE S256), and
serves the page what it needs at `/ui/signin.json`: the endpoints, the client id, the scopes and
the resource the tokens must be issued for (`http.public_url`, RFC 8707). The browser does the
rest: parley never sees a code, a verifier or a refresh token.

The page's Content-Security-Policy lets it `fetch` from one more origin only: the token
endpoint's (the revocation endpoint is used only when it is on that same origin). Metadata is
cached; a failed discovery is retried after a short while, and meanwhile the page says that
sign-in is unavailable.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx2
from pydantic import BaseModel

from parley.config import ServerConfig

logger = logging.getLogger(__name__)

METADATA_CACHE_S = 300.0
RETRY_AFTER_FAILURE_S = 10.0
DISCOVERY_TIMEOUT_S = 5.0
MAX_METADATA_BYTES = 256 * 1024
# An origin as it may appear in a CSP source list: scheme, host and optional port, nothing else.
_ORIGIN = re.compile(r"https?://(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?")


class SignInPage(BaseModel):
    """`/ui/signin.json`: how the page signs people in."""

    method: Literal["token", "oauth", "unavailable"]
    detail: str | None = None
    issuer: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    revocation_endpoint: str | None = None
    client_id: str | None = None
    scope: str | None = None
    resource: str | None = None
    # RFC 9207: the server puts `iss` in every authorization response, so one without is refused.
    iss_parameter_supported: bool = False


@dataclass(frozen=True, slots=True)
class SignInSettings:
    issuer: str
    client_id: str
    scope: str
    resource: str


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be: RFC 8414 §3.1 (the well-known segment inserted before
    the issuer's path), then OpenID Connect Discovery 1.0 (appended to it)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    root = f"{parts.scheme}://{parts.netloc}"
    return [
        f"{root}/.well-known/oauth-authorization-server{path}",
        f"{root}{path}/.well-known/openid-configuration",
    ]


def origin_of(url: str) -> str | None:
    """`scheme://host[:port]` of `url`, or None when it is not a plain http(s) origin."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    return origin if _ORIGIN.fullmatch(origin) and not parts.username else None


def _loopback(host: str | None) -> bool:
    if host in (None, ""):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _endpoint(metadata: dict[str, Any], name: str, required: bool) -> str | None:
    value = metadata.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or origin_of(value) is None:
        raise ValueError(f"its {name} is missing or not an http(s) URL")
    parts = urlsplit(value)
    if parts.fragment or (parts.scheme != "https" and not _loopback(parts.hostname)):
        raise ValueError(f"its {name} must be an https URL without a fragment (http only on loopback)")
    return value


def page_settings(settings: SignInSettings, metadata: dict[str, Any]) -> SignInPage:
    """The page's settings from checked metadata.

    Raises:
        ValueError: the metadata cannot serve a browser's sign-in (the reason)."""
    if metadata.get("issuer") != settings.issuer:
        # RFC 8414 §3.3: metadata for another issuer is not this server's.
        raise ValueError(f"it names the issuer {str(metadata.get('issuer'))[:200]!r}, not {settings.issuer}")
    if "code" not in (metadata.get("response_types_supported") or []):
        raise ValueError("it does not offer the authorization code flow (response_types_supported)")
    if "S256" not in (metadata.get("code_challenge_methods_supported") or []):
        raise ValueError("it does not advertise PKCE with S256 (code_challenge_methods_supported)")
    token = _endpoint(metadata, "token_endpoint", required=True)
    assert token is not None
    revocation = _endpoint(metadata, "revocation_endpoint", required=False)
    if revocation is not None and origin_of(revocation) != origin_of(token):
        revocation = None  # the page may reach one origin only
    return SignInPage(
        method="oauth",
        issuer=settings.issuer,
        authorization_endpoint=_endpoint(metadata, "authorization_endpoint", required=True),
        token_endpoint=token,
        revocation_endpoint=revocation,
        client_id=settings.client_id,
        scope=settings.scope,
        resource=settings.resource,
        iss_parameter_supported=metadata.get("authorization_response_iss_parameter_supported") is True,
    )


class UiSignIn:
    """The page's sign-in settings, from the authorization server's metadata, fetched when the
    page first asks and kept for `METADATA_CACHE_S`."""

    def __init__(
        self,
        settings: SignInSettings,
        http: httpx2.AsyncClient,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._http = http
        self._clock = clock
        self._page: SignInPage | None = None
        self._until = 0.0
        self._lock = anyio.Lock()

    async def page(self) -> SignInPage:
        async with self._lock:
            if self._page is None or self._clock() >= self._until:
                self._page = await self._discover()
                ok = self._page.method == "oauth"
                self._until = self._clock() + (METADATA_CACHE_S if ok else RETRY_AFTER_FAILURE_S)
            return self._page

    async def connect_origin(self) -> str | None:
        """The one origin besides parley's the page may fetch from: the token endpoint's."""
        page = await self.page()
        return origin_of(page.token_endpoint) if page.token_endpoint else None

    async def _discover(self) -> SignInPage:
        problems = []
        for url in metadata_urls(self._settings.issuer):
            try:
                metadata = await self._fetch(url)
            except (httpx2.HTTPError, TimeoutError, ValueError) as exc:
                problems.append(f"{url}: {exc}")
                continue
            try:
                return page_settings(self._settings, metadata)
            except ValueError as exc:
                problems.append(f"{url}: {exc}")
                break  # the server answered: its metadata is what it is
        logger.warning(
            "the authorization server's metadata cannot serve /ui sign-in: %s", "; ".join(problems)
        )
        return SignInPage(
            method="unavailable",
            detail="Signing in is unavailable: parley cannot read the authorization server's metadata now.",
        )

    async def _fetch(self, url: str) -> dict[str, Any]:
        with anyio.fail_after(DISCOVERY_TIMEOUT_S):
            response = await self._http.get(url, headers={"Accept": "application/json"})
        if response.status_code != 200:
            raise ValueError(f"answered {response.status_code}")
        if len(response.content) > MAX_METADATA_BYTES:
            raise ValueError(f"sent more than {MAX_METADATA_BYTES} bytes")
        data = response.json()
        if not isinstance(data, dict):
            raise ValueError("did not send a JSON object")
        return data


def build_ui_sign_in(config: ServerConfig, http: httpx2.AsyncClient) -> UiSignIn | None:
    """The page's OAuth sign-in, when `ui.client_id` is set with `auth: oauth`."""
    oauth, client_id, resource = config.auth.oauth, config.ui.client_id, config.http.public_url
    if config.auth.mode != "oauth" or oauth is None or client_id is None or resource is None:
        return None
    return UiSignIn(SignInSettings(oauth.issuer, client_id, config.ui.scope, resource), http)
