"""`auth: oauth`: access tokens from the organisation's authorization server.

parley is an OAuth 2.1 resource server, as the MCP authorization specification asks. A JWT
access token is verified with PyJWT against the authorization server's published keys: the
signature (an asymmetric algorithm from `oauth.algorithms`, the one the key is for), `iss`
exactly the configured issuer, `aud` naming this server's resource URL (RFC 8707: the SDK's
bearer middleware does not check the audience, so this verifier must), `exp` and `nbf` within
`leeway_s`, and a `sub`. An opaque token is asked about at the RFC 7662 introspection endpoint
when one is configured, with the same checks on its answer.

The key set is fetched with httpx2 (PyJWT's own PyJWKClient fetches with blocking urllib) and
parsed by PyJWT (`PyJWKSet`); it is cached for `jwks_cache_s`, and a token naming a key id the
cache does not hold refetches it (at most every `jwks_refresh_min_s`), so a rotated key is
picked up without a restart.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import jwt
from jwt import PyJWK, PyJWKSet
from mcp.server.auth.provider import AccessToken

from parley.config.auth import OAuthConfig
from parley.server.auth_tokens import MAX_TOKEN_CHARS, Refusal, access_token

logger = logging.getLogger(__name__)

# Bounds on what the authorization server may send us.
MAX_JWKS_BYTES = 1024 * 1024
MAX_INTROSPECTION_BYTES = 256 * 1024
# The longest subject, issuer or client id accepted (they become stored principal names).
MAX_CLAIM_CHARS = 1024
# Answers of the introspection endpoint kept at most (by the SHA-256 of their token).
MAX_CACHED_INTROSPECTIONS = 10_000


def audiences(resource: str) -> list[str]:
    """The `aud` values that name `resource`: as configured, with and without a trailing slash."""
    bare = resource.rstrip("/")
    return [bare, bare + "/"]


def scopes_of(claims: dict[str, Any]) -> list[str]:
    """Scopes from `scope` (RFC 9068: space-separated) or `scp` (a list, as some servers send)."""
    raw = claims.get("scope", claims.get("scp"))
    if isinstance(raw, str):
        return [s for s in raw.split() if s]
    if isinstance(raw, list):
        return [s for s in raw if isinstance(s, str) and s]
    return []


def client_of(claims: dict[str, Any]) -> str | None:
    for name in ("client_id", "azp", "cid"):
        value = claims.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def oauth_principal(issuer: str, subject: str) -> str:
    """The owner of what a token's holder creates: issuer and subject (a subject is unique only
    within its issuer). An issuer URL has no fragment, so the first '#' splits the two."""
    return f"{issuer}#{subject}"


def _printable(text: str) -> bool:
    return len(text) <= MAX_CLAIM_CHARS and text.isprintable()


class JwksKeys:
    """The authorization server's signing keys, by key id."""

    def __init__(
        self,
        url: str,
        http: httpx2.AsyncClient,
        *,
        cache_s: float,
        refresh_min_s: float,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._http = http
        self._cache_s = cache_s
        self._refresh_min_s = refresh_min_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._keys: dict[str | None, PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = anyio.Lock()
        self.fetches = 0

    async def key(self, kid: str | None) -> PyJWK | None:
        """The key `kid` names (a token without a kid: the only key of a one-key set); None when
        the set, fetched again if it may have changed, does not hold it.

        Raises:
            KeysUnavailable: the keys could not be fetched and none are cached.
        """
        now = self._clock()
        if self._fetched_at is None or now - self._fetched_at >= self._cache_s:
            await self._refresh(force=False)
        found = self._find(kid)
        if (
            found is None
            and self._fetched_at is not None
            and self._clock() - self._fetched_at >= self._refresh_min_s
        ):
            await self._refresh(force=True)
            found = self._find(kid)
        return found

    def _find(self, kid: str | None) -> PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self, *, force: bool) -> None:
        async with self._lock:
            fetched_at = self._fetched_at
            # Another caller refreshed while this one waited for the lock.
            if fetched_at is not None and self._clock() - fetched_at < (
                self._refresh_min_s if force else self._cache_s
            ):
                return
            try:
                self._keys = await self._fetch()
            except KeysUnavailable:
                if not self._keys:
                    raise
                # Keep using the keys we have; try again after the shorter interval.
                self._fetched_at = self._clock() - self._cache_s + self._refresh_min_s
                return
            self._fetched_at = self._clock()

    async def _fetch(self) -> dict[str | None, PyJWK]:
        self.fetches += 1
        try:
            with anyio.fail_after(self._timeout_s):
                response = await self._http.get(self._url, headers={"Accept": "application/json"})
            if response.status_code != 200:
                raise KeysUnavailable(f"{self._url} answered {response.status_code}")
            if len(response.content) > MAX_JWKS_BYTES:
                raise KeysUnavailable(f"{self._url} sent more than {MAX_JWKS_BYTES} bytes")
            data = response.json()
            keys = PyJWKSet.from_dict(data).keys if isinstance(data, dict) else []
        except (httpx2.HTTPError, TimeoutError, ValueError, jwt.PyJWTError) as exc:
            logger.warning("the signing keys at %s could not be fetched: %s", self._url, exc)
            raise KeysUnavailable(str(exc)) from exc
        found: dict[str | None, PyJWK] = {}
        for key in keys:
            if key.public_key_use not in (None, "sig"):
                continue
            found[key.key_id] = key
        logger.info("fetched %d signing key(s) from %s", len(found), self._url)
        return found


class KeysUnavailable(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Cached:
    access: AccessToken
    until: float


class OAuthVerifier:
    """A JWT by its signature and claims; an opaque token by introspection (when configured)."""

    def __init__(
        self,
        config: OAuthConfig,
        resource: str,
        http: httpx2.AsyncClient,
        *,
        introspection_secret: str | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._audiences = audiences(config.audience or resource)
        self._resource = resource
        self._http = http
        self._secret = introspection_secret
        self._clock = clock
        self._monotonic = monotonic
        self.keys = (
            JwksKeys(
                config.jwks_url,
                http,
                cache_s=config.jwks_cache_s,
                refresh_min_s=config.jwks_refresh_min_s,
                timeout_s=config.jwks_timeout_s,
                clock=monotonic,
            )
            if config.jwks_url is not None
            else None
        )
        self._introspected: dict[bytes, _Cached] = {}

    async def check(self, token: str) -> AccessToken | Refusal:
        if not token or len(token) > MAX_TOKEN_CHARS:
            return Refusal("The access token is malformed.")
        if token.count(".") == 2 and self.keys is not None:
            return await self._check_jwt(token)
        if self._config.introspection is not None:
            return await self._introspect(token)
        return Refusal("The access token is not a JWT; this server accepts only signed JWT access tokens.")

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's TokenVerifier protocol."""
        checked = await self.check(token)
        return checked if isinstance(checked, AccessToken) else None

    # ------------------------------------------------------------------ JWT

    async def _check_jwt(self, token: str) -> AccessToken | Refusal:
        assert self.keys is not None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return Refusal("The access token is malformed.")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._config.algorithms:
            return Refusal(
                f"The access token's algorithm is not accepted; use one of {', '.join(self._config.algorithms)}."
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            return Refusal("The access token is malformed.")
        try:
            key = await self.keys.key(kid)
        except KeysUnavailable:
            return Refusal(
                "The authorization server's signing keys cannot be fetched now; try again shortly.",
                status=503,
            )
        if key is None:
            return Refusal("The access token is signed with a key the authorization server does not publish.")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self._audiences,
                issuer=self._config.issuer,
                leeway=self._config.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            return Refusal("The access token has expired.")
        except jwt.ImmatureSignatureError:
            return Refusal("The access token is not valid yet (nbf or iat is in the future).")
        except jwt.InvalidAudienceError:
            return Refusal(
                f"The access token was not issued for this server (its audience must be {self._audiences[0]})."
            )
        except jwt.InvalidIssuerError:
            return Refusal("The access token was issued by another authorization server.")
        except jwt.MissingRequiredClaimError as exc:
            return Refusal(f"The access token has no {exc.claim} claim.")
        except jwt.InvalidSignatureError:
            return Refusal("The access token's signature is not valid.")
        except jwt.PyJWTError:
            return Refusal("The access token is malformed or not valid.")
        return self._access(claims)

    def _access(self, claims: dict[str, Any]) -> AccessToken | Refusal:
        subject, issuer, client = claims.get("sub"), claims.get("iss"), client_of(claims)
        if not isinstance(subject, str) or not subject or not isinstance(issuer, str):
            return Refusal("The access token has no subject.")
        if not all(_printable(v) for v in (subject, issuer, client or "")):
            # A principal is stored, listed and compared: no control characters, within bounds.
            return Refusal("The access token's subject, issuer or client id is not usable text.")
        exp = claims.get("exp")
        return access_token(
            principal=oauth_principal(issuer, subject),
            scopes=scopes_of(claims),
            client_id=client,
            issuer=issuer,
            subject=subject,
            expires_at=int(exp) if isinstance(exp, int | float) else None,
            resource=self._resource,
        )

    # ------------------------------------------------------------------ introspection

    async def _introspect(self, token: str) -> AccessToken | Refusal:
        config = self._config.introspection
        assert config is not None
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._introspected.get(digest)
        if cached is not None and cached.until > self._monotonic():
            expires = cached.access.expires_at
            if expires is None or expires + self._config.leeway_s > self._clock():
                return cached.access
        # The client's credentials, when it has some (RFC 7662 leaves the method to the server).
        extra: dict[str, Any] = (
            {"auth": httpx2.BasicAuth(config.client_id, self._secret or "")} if config.client_id else {}
        )
        try:
            with anyio.fail_after(config.timeout_s):
                response = await self._http.post(
                    config.url,
                    data={"token": token, "token_type_hint": "access_token"},
                    headers={"Accept": "application/json"},
                    **extra,
                )
            if response.status_code != 200 or len(response.content) > MAX_INTROSPECTION_BYTES:
                raise ValueError(f"answered {response.status_code}")
            answer = response.json()
        except (httpx2.HTTPError, TimeoutError, ValueError) as exc:
            logger.warning("the introspection endpoint %s failed: %s", config.url, exc)
            return Refusal(
                "The authorization server cannot be asked about the token now; try again shortly.", status=503
            )
        checked = self._introspected_access(answer)
        if isinstance(checked, AccessToken) and config.cache_s > 0:
            if len(self._introspected) >= MAX_CACHED_INTROSPECTIONS:
                self._introspected.clear()
            self._introspected[digest] = _Cached(checked, self._monotonic() + config.cache_s)
        return checked

    def _introspected_access(self, answer: Any) -> AccessToken | Refusal:
        if not isinstance(answer, dict) or answer.get("active") is not True:
            return Refusal("The access token is not active (revoked, expired or unknown).")
        issuer = answer.get("iss", self._config.issuer)
        if issuer != self._config.issuer:
            return Refusal("The access token was issued by another authorization server.")
        aud = answer.get("aud")
        given = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not any(a in self._audiences for a in given):
            return Refusal(
                f"The access token was not issued for this server (its audience must be {self._audiences[0]})."
            )
        now = self._clock()
        leeway = self._config.leeway_s
        exp, nbf = answer.get("exp"), answer.get("nbf")
        if isinstance(exp, int | float) and exp + leeway < now:
            return Refusal("The access token has expired.")
        if isinstance(nbf, int | float) and nbf - leeway > now:
            return Refusal("The access token is not valid yet (nbf is in the future).")
        return self._access({**answer, "iss": issuer})
