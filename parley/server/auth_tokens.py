"""Bearer tokens: what a verifier answers, and the static tokens of `auth: tokens`.

A verifier turns the token of an `Authorization: Bearer` header into the SDK's `AccessToken`
(so the SDK's session binding, `get_access_token()` and the binding of input-required rounds
to their principal work as designed), or into a `Refusal` that says why in words safe to send
back. The token itself is never kept in the `AccessToken` (`token` holds a placeholder), never
logged and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mcp.server.auth.provider import AccessToken

from parley.config.auth import TokenEntry
from parley.redaction import REDACTED
from parley.runtime.access import Principal

logger = logging.getLogger(__name__)

# The `iss` parley gives the principals of its static tokens (they have no issuer of their own).
STATIC_ISSUER = "parley:tokens"
# Where an AccessToken of ours carries the principal's name (we build `claims` ourselves; nothing
# of a token's own claims is copied into it).
PRINCIPAL_CLAIM = "principal"
# Longer bearer values are refused before any work (a JWT of a few KB is plenty).
MAX_TOKEN_CHARS = 16_384


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a token was not accepted: `description` goes to the caller (no secret, no quote);
    `status` 401, or 503 when it could not be checked at all (the keys are unreachable); `error`
    the RFC 6750 code (invalid_request: the Authorization header itself is malformed)."""

    description: str
    status: int = 401
    error: str = "invalid_token"


class BearerVerifier(Protocol):
    async def check(self, token: str) -> AccessToken | Refusal:
        """The token's access (principal, scopes, expiry), or why it is refused."""
        ...


def access_token(
    *,
    principal: str,
    scopes: Sequence[str],
    client_id: str | None,
    issuer: str,
    subject: str,
    expires_at: int | None = None,
    resource: str | None = None,
) -> AccessToken:
    return AccessToken(
        token=REDACTED,
        client_id=client_id or principal,
        scopes=list(scopes),
        expires_at=expires_at,
        resource=resource,
        subject=subject,
        claims={"iss": issuer, PRINCIPAL_CLAIM: principal},
    )


def principal_of(token: AccessToken) -> Principal:
    claims = token.claims or {}
    name = str(claims.get(PRINCIPAL_CLAIM) or token.subject or token.client_id)
    client = None if token.client_id == name else token.client_id
    return Principal(id=name, scopes=frozenset(token.scopes), client=client, authenticated=True)


class StaticTokenVerifier:
    """`auth: tokens`: a token is accepted when its SHA-256 equals a configured one. Every entry is
    compared, each in constant time, so the time taken says nothing about which entry (or how much
    of one) matched."""

    def __init__(self, entries: Sequence[TokenEntry]) -> None:
        self._entries = tuple(entries)

    async def check(self, token: str) -> AccessToken | Refusal:
        if not token or len(token) > MAX_TOKEN_CHARS:
            return Refusal("The bearer token is not one this server accepts.")
        digest = hashlib.sha256(token.encode()).digest()
        found: TokenEntry | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest):
                found = entry
        if found is None:
            return Refusal("The bearer token is not one this server accepts.")
        return access_token(
            principal=found.name,
            scopes=sorted(found.scopes),
            client_id=None,
            issuer=STATIC_ISSUER,
            subject=found.name,
        )

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's TokenVerifier protocol."""
        checked = await self.check(token)
        return checked if isinstance(checked, AccessToken) else None
