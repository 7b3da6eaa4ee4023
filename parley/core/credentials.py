"""Per-principal credentials for downstream servers (docs/credentials.md): the record the store
keeps of one (principal, server, issuer), which holds ciphertexts and never a clear token, when
a token is refreshed, and who may claim a refresh.

A refresh token is spent once. Several replicas may find the same token near its expiry at the
same moment, so a refresh is claimed first: one claimant holds the row until it finishes or its
claim runs out (a replica that crashed mid-refresh blocks the others for CLAIM_S at most).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

# What a ciphertext is of: its kind is part of the associated data, so an access token's
# ciphertext does not decrypt as the refresh token of the same row.
# A pending flow's PKCE verifier is sealed the same way, as its own kind, with the flow in its key.
TokenKind = Literal["access", "refresh", "pkce_verifier"]

# A token is refreshed this long before it expires, so a call started just before the expiry
# does not reach the server with a token that lapses on the way.
REFRESH_MARGIN_S = 60.0
# How long a refresh claim holds: longer than a token request takes, short enough that a
# crashed replica's claim soon stops blocking the others.
CLAIM_S = 30.0


@dataclass(frozen=True, slots=True)
class CredentialKey:
    """What a credential is stored by: whose it is, for which configured server, from which
    authorization server (the `iss` its tokens come from)."""

    principal: str
    server: str
    issuer: str


@dataclass(frozen=True, slots=True)
class Sealed:
    """One token encrypted with AES-GCM: the nonce it was encrypted with and the ciphertext (its
    tag included)."""

    nonce: bytes
    ciphertext: bytes


@dataclass(frozen=True, slots=True)
class StoredCredential:
    """A credential as the store keeps it: ciphertexts only, the id of the key that encrypted
    them, and what may be shown of it (scopes, expiry), plus who holds a refresh claim."""

    key: CredentialKey
    key_id: str
    access: Sealed
    refresh: Sealed | None
    scopes: tuple[str, ...]
    expires_at: float | None
    created_at: float
    updated_at: float
    claimed_by: str | None = None
    claimed_until: float | None = None


def associated_data(key: CredentialKey, kind: TokenKind) -> bytes:
    """The associated data a token of `kind` of the credential `key` is sealed with: a ciphertext
    copied to another row, or to the other kind of the same row, does not decrypt. A JSON array,
    so no two keys give the same bytes (a separator inside a name cannot shift the fields)."""
    return json.dumps(["parley credential v1", key.principal, key.server, key.issuer, kind]).encode()


def needs_refresh(expires_at: float | None, now: float, margin_s: float = REFRESH_MARGIN_S) -> bool:
    """Whether a token expiring at `expires_at` is refreshed now (None: it does not expire)."""
    return expires_at is not None and now >= expires_at - margin_s


def may_claim(claimed_by: str | None, claimed_until: float | None, claimant: str, now: float) -> bool:
    """Whether `claimant` may claim a credential's refresh: nobody holds it, the holder's claim
    ran out, or the claimant holds it already. The store's claim statement is this rule."""
    if claimed_by is None or claimed_by == claimant:
        return True
    return claimed_until is None or claimed_until < now
