"""The configuration of serving many users: `auth:` (who a caller is), `limits:` (fair use per
principal), `audit:` (how long the trail is kept), and the `users:` / `approvers:` of an agent.

Models only; loading.py loads them, reads the environment variables they name and checks what the
sections say together (with `http:`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from parley.config.base import Strict
from parley.core.scopes import LOCAL, SCOPES, USE, is_known_scope

# A token's name is the principal it stands for: what `users:`, `approvers:` and the audit show.
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}")
RESERVED_NAMES = (LOCAL, "cli")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# A token shorter than this is guessable; `parley token new` makes 43 characters (32 random bytes).
MIN_TOKEN_CHARS = 24
# Asymmetric signatures only: a shared-secret (HS*) key would let whoever verifies also sign.
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
# Per-principal limits of a server with many users (auth tokens or oauth) where `limits:` does
# not set them: enough for a person's parallel work, not enough for one to crowd out the rest.
MULTI_USER_DEFAULTS: dict[str, int] = {"running_turns": 4, "sessions_per_minute": 30}
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?")


def token_digest(token: str) -> str:
    """The SHA-256 of a token, as `auth.tokens[].sha256` holds it (lowercase hex)."""
    return hashlib.sha256(token.encode()).hexdigest()


class Members(Strict):
    """Principals and scopes: an agent's `users:` or `approvers:`."""

    principals: list[str] = Field(
        default_factory=list,
        description="Principal names: a token's name (auth: tokens) or '<issuer>#<subject>' (auth: oauth).",
    )
    scopes: list[str] = Field(
        default_factory=list, description="Any caller whose token has one of these scopes."
    )

    @model_validator(mode="after")
    def _not_empty(self) -> Members:
        if not self.principals and not self.scopes:
            raise ValueError(
                "list at least one principal or scope (or remove the field: then nobody is singled out)"
            )
        return self


class StaticToken(Strict):
    """A bearer token for self-hosting, mapped to a principal and its scopes. The file holds only
    its SHA-256, or names the environment variable that holds it."""

    name: str = Field(description="The principal this token stands for (letters, digits, _ . @ + -).")
    sha256: str | None = Field(
        None, description="SHA-256 of the token in hex (what 'parley token new' prints)."
    )
    token_env: str | None = Field(None, description="Or: the environment variable that holds the token.")
    scopes: list[str] = Field(
        default_factory=lambda: [USE], description="parley:use, parley:admin, parley:metrics."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOKEN_NAME.fullmatch(value):
            raise ValueError("must be 1-128 letters, digits or _ . @ + - (starting with a letter or digit)")
        if value in RESERVED_NAMES:
            raise ValueError(
                f"'{value}' is reserved (stdio callers are 'local', the CLI is 'cli'); pick another"
            )
        return value

    @field_validator("sha256")
    @classmethod
    def _hash(cls, value: str | None) -> str | None:
        if value is not None and not _SHA256_HEX.fullmatch(value):
            raise ValueError(
                "must be 64 lowercase hex digits, the SHA-256 of the token: run 'parley token new NAME' and "
                "paste the line it prints (never the token itself)"
            )
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        return _known_scopes(value)

    @model_validator(mode="after")
    def _one_source(self) -> StaticToken:
        if (self.sha256 is None) == (self.token_env is None):
            raise ValueError(
                "give either sha256 (the token's hash) or token_env (a variable holding it), not both"
            )
        return self


def _known_scopes(value: list[str]) -> list[str]:
    unknown = [s for s in value if not is_known_scope(s)]
    if unknown:
        known = ", ".join(SCOPES)
        raise ValueError(
            f"unknown scope(s) {', '.join(unknown)}; parley knows: {known} and parley:trigger:<word>"
        )
    if not value:
        raise ValueError(f"give at least one scope ({', '.join(SCOPES)})")
    return value


class Introspection(Strict):
    """RFC 7662 introspection, for access tokens that are not JWTs (opaque tokens)."""

    url: str = Field(description="The authorization server's introspection endpoint.")
    client_id: str | None = Field(None, description="parley's client id at the authorization server.")
    client_secret_env: str | None = Field(None, description="The environment variable holding its secret.")
    cache_s: float = Field(
        60.0,
        ge=0,
        le=3600,
        description="Seconds an answer is reused (never beyond the token's expiry); 0: never.",
    )
    timeout_s: float = Field(5.0, gt=0, le=60, description="Seconds parley waits for an answer.")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value)


class OAuthConfig(Strict):
    """JWT access tokens from the organisation's authorization server (MCP authorization)."""

    issuer: str = Field(description="The authorization server: the 'iss' every token must carry, exactly.")
    jwks_url: str | None = Field(
        None, description="Where the authorization server publishes its signing keys."
    )
    audience: str | None = Field(
        None, description="The 'aud' tokens must carry (default: http.public_url, RFC 8707)."
    )
    algorithms: list[str] = Field(
        default_factory=lambda: ["RS256", "PS256", "ES256", "EdDSA"],
        description="Signature algorithms accepted (asymmetric only).",
    )
    leeway_s: float = Field(30.0, ge=0, le=300, description="Clock skew allowed on exp and nbf, in seconds.")
    jwks_cache_s: float = Field(
        600.0, gt=0, le=86_400, description="Seconds fetched keys are used before a refresh."
    )
    jwks_refresh_min_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description=(
            "A token signed with an unknown key refetches the keys at most once in this many seconds."
        ),
    )
    jwks_timeout_s: float = Field(5.0, gt=0, le=60, description="Seconds parley waits for the keys.")
    introspection: Introspection | None = Field(None, description="RFC 7662, for opaque (non-JWT) tokens.")

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("jwks_url")
    @classmethod
    def _jwks(cls, value: str | None) -> str | None:
        return _http_url(value) if value is not None else None

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, value: list[str]) -> list[str]:
        bad = [a for a in value if a not in JWT_ALGORITHMS]
        if bad or not value:
            raise ValueError(
                f"{'unsupported: ' + ', '.join(bad) if bad else 'empty'}; use asymmetric algorithms from: "
                f"{', '.join(JWT_ALGORITHMS)} (never 'none' or a shared-secret HS*)"
            )
        return value

    @model_validator(mode="after")
    def _keys_or_introspection(self) -> OAuthConfig:
        if self.jwks_url is None and self.introspection is None:
            raise ValueError(
                "give jwks_url (the authorization server's signing keys, for JWT access tokens) or "
                "introspection (for opaque tokens), or both"
            )
        return self


AuthMode = Literal["none", "tokens", "oauth"]


class AuthConfig(Strict):
    mode: AuthMode = Field(
        "none",
        description=(
            "none: no authentication, loopback only; tokens: static bearer tokens; oauth: access tokens "
            "from an authorization server (MCP authorization)."
        ),
    )
    tokens: list[StaticToken] = Field(default_factory=list, description="mode tokens: the accepted tokens.")
    oauth: OAuthConfig | None = Field(None, description="mode oauth: the authorization server.")

    @model_validator(mode="after")
    def _mode_fields(self) -> AuthConfig:
        if self.mode == "tokens" and not self.tokens:
            raise ValueError("mode tokens needs at least one entry under tokens (see 'parley token new')")
        if self.mode != "tokens" and self.tokens:
            raise ValueError(
                f"tokens are used only with mode: tokens (mode is {self.mode}); set the mode or remove them"
            )
        if self.mode == "oauth" and self.oauth is None:
            raise ValueError("mode oauth needs an oauth section (issuer, jwks_url)")
        if self.mode != "oauth" and self.oauth is not None:
            raise ValueError(
                f"oauth is used only with mode: oauth (mode is {self.mode}); set the mode or remove it"
            )
        names = [t.name for t in self.tokens]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"token name(s) {', '.join(duplicates)} appear more than once; one entry per name"
            )
        return self

    @property
    def authenticates(self) -> bool:
        return self.mode != "none"


class PrincipalLimits(Strict):
    running_turns: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Sessions of one principal running a turn at once, counted in the database (so across "
            "replicas); a message that would start one more is refused until one ends. With auth "
            f"tokens or oauth {MULTI_USER_DEFAULTS['running_turns']} unless set (null: no limit)."
        ),
    )
    sessions_per_minute: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description=(
            "New sessions one principal may start per minute, counted in the database (so across "
            f"replicas). With auth tokens or oauth {MULTI_USER_DEFAULTS['sessions_per_minute']} unless set (null: no limit)."
        ),
    )
    messages_per_minute: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Messages one principal may send per minute, counted in the database (so across replicas).",
    )


class LimitsConfig(PrincipalLimits):
    """Fair use: the limits of every principal, and per-principal exceptions."""

    principals: dict[str, PrincipalLimits] = Field(
        default_factory=dict, description="Limits of one principal (by name), instead of the ones above."
    )

    def of(self, principal: str) -> PrincipalLimits:
        own = self.principals.get(principal)
        if own is None:
            return self
        return PrincipalLimits(
            **{
                name: getattr(own if name in own.model_fields_set else self, name)
                for name in PrincipalLimits.model_fields
            }
        )

    def for_auth(self, mode: AuthMode) -> LimitsConfig:
        """The limits a server with this auth mode applies: with many users (tokens, oauth) each
        limit not set in the file takes its default of MULTI_USER_DEFAULTS, so one principal
        cannot take every turn; with auth none (one local user) the file's, as written."""
        if mode == "none":
            return self
        unset = {k: v for k, v in MULTI_USER_DEFAULTS.items() if k not in self.model_fields_set}
        return self.model_copy(update=unset) if unset else self


class AuditConfig(Strict):
    retention_days: float = Field(
        365.0,
        gt=0,
        le=36_500,
        description="Days audit entries are kept (they outlive their sessions); fractions allowed.",
    )
    purge_interval_s: float = Field(
        3600.0, gt=0, le=86_400, description="Seconds between two deletions of old entries."
    )


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """A configured token as the server holds it: the principal, its scopes and the token's
    SHA-256 (the token itself is never kept, also when it came from the environment)."""

    name: str
    scopes: frozenset[str]
    digest: bytes


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment or parts.query:
        raise ValueError(
            f"'{value}' is not an http(s) URL without query or fragment, e.g. https://auth.example.com"
        )
    return value


def check_public_url(value: str) -> str | None:
    """Why `value` cannot be http.public_url, or None."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "must be the http(s) URL clients use for MCP, e.g. https://parley.example.com/mcp"
    if parts.query or parts.fragment:
        return "must have no query or fragment (it is the resource URL tokens are issued for)"
    if parts.username or parts.password:
        return "must not hold a user name or password"
    return None


# parley's own first path segments: a prefix named like one would take requests meant for it.
_OWN_SEGMENTS = ("ui", "v1", "mcp", "healthz", "metrics", ".well-known", "oauth")
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+")


def check_base_path(value: str) -> str | None:
    """Why `value` cannot be http.base_path, or None."""
    if value == "":
        return None
    segments = value.split("/")
    if (
        not value.startswith("/")
        or value.endswith("/")
        or not all(_PATH_SEGMENT.fullmatch(s) for s in segments[1:])
    ):
        return (
            f"'{value}' must be a path such as /parley or /tools/parley: a leading /, no trailing /, "
            "segments of letters, digits and . _ ~ -"
        )
    if segments[1] in _OWN_SEGMENTS or any(s in (".", "..") for s in segments):
        return f"'{value}' must not begin with one of parley's own paths ({', '.join(_OWN_SEGMENTS)}) or hold . or .."
    return None


def check_allowed_host(value: str) -> str | None:
    """Why `value` cannot be an entry of http.allowed_hosts, or None."""
    if "://" in value or "/" in value:
        return (
            f"'{value}' must be a host name as clients send it in Host (e.g. parley.example.com), not a URL"
        )
    if not _HOST.fullmatch(value):
        return f"'{value}' is not a host name, an IP address or [IPv6 address], with an optional :port"
    return None
