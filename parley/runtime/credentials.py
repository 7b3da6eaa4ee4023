"""Per-principal credentials kept safely (docs/credentials.md): `Keyring` encrypts each token with
AES-GCM under the current key and decrypts with any configured one, and `CredentialVault` puts a
keyring in front of the store, so clear tokens exist only in this process's memory.

Each token is sealed with the associated data of its row and kind (core.credentials): a
ciphertext copied to another principal's row, or swapped between access and refresh, fails its
tag check instead of handing one principal's token to another.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from parley.config.credentials import KEY_BYTES, CredentialKeys
from parley.core.credentials import (
    CLAIM_S,
    CredentialKey,
    Sealed,
    StoredCredential,
    TokenKind,
    associated_data,
)
from parley.errors import CredentialError
from parley.storage.integration_ports import CredentialStore

# AES-GCM's standard nonce: 96 random bits, drawn afresh for every encryption.
NONCE_BYTES = 12


def new_key() -> str:
    """A fresh key as the configuration takes it: 32 random bytes, URL-safe base64."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def key_id(key: bytes) -> str:
    """The id stored with each row of the key that sealed it: a digest, so the id says which key
    without revealing it, and needs no name in the configuration."""
    return hashlib.sha256(b"parley credential key id\0" + key).hexdigest()[:16]


def _where(key: CredentialKey) -> str:
    return f"the credential of {key.principal!r} for {key.server!r} (issuer {key.issuer})"


class Keyring:
    """The current key, which seals, and the previous ones, which only open (during a rotation)."""

    def __init__(self, current: bytes, previous: Sequence[bytes] = ()) -> None:
        for key in (current, *previous):
            if len(key) != KEY_BYTES:
                raise ValueError(f"a credential key is {KEY_BYTES} bytes")
        self.current_id = key_id(current)
        self._sealer = AESGCM(current)
        self._openers = {key_id(key): AESGCM(key) for key in (*previous, current)}

    @classmethod
    def of(cls, keys: CredentialKeys) -> Keyring:
        return cls(keys.current, keys.previous)

    def seal(self, key: CredentialKey, kind: TokenKind, token: str) -> Sealed:
        nonce = os.urandom(NONCE_BYTES)
        return Sealed(nonce, self._sealer.encrypt(nonce, token.encode(), associated_data(key, kind)))

    def open(self, key: CredentialKey, kind: TokenKind, kid: str, sealed: Sealed) -> str:
        """The clear token. Raises CredentialError when key `kid` is not configured, or the
        ciphertext does not belong to this row and kind (altered, moved or swapped)."""
        opener = self._openers.get(kid)
        if opener is None:
            raise CredentialError(
                f"{_where(key)} was encrypted with key id {kid}, which is not configured: add that key to "
                "credentials.previous_keys_env or previous_key_files, or revoke the credential"
            )
        try:
            return opener.decrypt(sealed.nonce, sealed.ciphertext, associated_data(key, kind)).decode()
        except InvalidTag:
            raise CredentialError(
                f"the {kind} token of {_where(key)} does not decrypt with key id {kid}: the row was altered "
                "or copied from another one; revoke it and authorize again"
            ) from None


@dataclass(frozen=True, slots=True)
class ClearCredential:
    """A credential opened for use: the tokens are left out of its repr, so logging the record
    never shows them."""

    key: CredentialKey
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    scopes: tuple[str, ...]
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class Rotation:
    """What `CredentialVault.rotate` did: rows sealed again under the current key, rows that were
    under it already, rows that changed while being rotated (written by a save or a refresh, so
    under the current key), and rows no configured key opens (listed by key)."""

    resealed: int = 0
    current: int = 0
    changed: int = 0
    unreadable: tuple[CredentialKey, ...] = ()


class CredentialVault:
    """The store's credentials through the keyring: clear tokens in, clear tokens out, ciphertexts
    only in the database."""

    def __init__(
        self, store: CredentialStore, keyring: Keyring, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._keyring = keyring
        self._clock = clock

    def _seal(
        self,
        key: CredentialKey,
        access: str,
        refresh: str | None,
        expires_at: float | None,
        scopes: Sequence[str],
        created_at: float,
    ) -> StoredCredential:
        ring = self._keyring
        return StoredCredential(
            key=key,
            key_id=ring.current_id,
            access=ring.seal(key, "access", access),
            refresh=None if refresh is None else ring.seal(key, "refresh", refresh),
            scopes=tuple(scopes),
            expires_at=expires_at,
            created_at=created_at,
            updated_at=self._clock(),
        )

    def _open(self, stored: StoredCredential) -> ClearCredential:
        ring, key, kid = self._keyring, stored.key, stored.key_id
        return ClearCredential(
            key=key,
            access_token=ring.open(key, "access", kid, stored.access),
            refresh_token=None if stored.refresh is None else ring.open(key, "refresh", kid, stored.refresh),
            scopes=stored.scopes,
            expires_at=stored.expires_at,
        )

    async def save(
        self,
        key: CredentialKey,
        *,
        access: str,
        refresh: str | None,
        expires_at: float | None,
        scopes: Sequence[str],
    ) -> StoredCredential:
        """Store a new authorization's tokens for `key`, replacing any before; returns the row."""
        stored = self._seal(key, access, refresh, expires_at, scopes, self._clock())
        await self._store.put_credential(stored)
        return stored

    async def load(self, key: CredentialKey) -> ClearCredential | None:
        stored = await self._store.get_credential(key)
        return None if stored is None else self._open(stored)

    async def of_server(self, principal: str, server: str) -> ClearCredential | None:
        """`principal`'s credential for `server`, opened: the newest, whatever its issuer."""
        rows = [c for c in await self._store.list_credentials(principal) if c.key.server == server]
        if not rows:
            return None
        return self._open(max(rows, key=lambda c: c.updated_at))

    async def revoke(self, principal: str, server: str | None = None) -> int:
        """Delete `principal`'s credentials (for `server` only, unless None); return how many."""
        return await self._store.delete_credentials(principal, server)

    async def claim_refresh(
        self, key: CredentialKey, claimant: str, claim_s: float = CLAIM_S
    ) -> ClearCredential | None:
        """The credential, opened, once `claimant` holds its refresh claim (None: another holds
        it, or there is none): spend its refresh token, then finish_refresh or release_refresh."""
        stored = await self._store.claim_refresh(key, claimant, self._clock(), claim_s)
        return None if stored is None else self._open(stored)

    async def finish_refresh(
        self,
        claimed: ClearCredential,
        claimant: str,
        *,
        access: str,
        refresh: str | None,
        expires_at: float | None,
        scopes: Sequence[str] | None = None,
    ) -> bool:
        """Store what a refresh returned and end the claim (False: the claim was lost, nothing
        written). A response without a refresh token keeps the one spent, as RFC 6749 allows; one
        without scopes keeps the scopes."""
        kept_refresh = claimed.refresh_token if refresh is None else refresh
        kept_scopes = claimed.scopes if scopes is None else scopes
        # The creation time is not written by a refresh (the row keeps its own): 0 stands in.
        stored = self._seal(claimed.key, access, kept_refresh, expires_at, kept_scopes, 0.0)
        return await self._store.finish_refresh(stored, claimant)

    async def release_refresh(self, key: CredentialKey, claimant: str) -> bool:
        return await self._store.release_refresh(key, claimant)

    async def rotate(self) -> Rotation:
        """Seal every credential not under the current key again under it. Rows a previous key
        sealed stay readable meanwhile; once this reports none unreadable, previous keys can go."""
        done = Rotation()
        for stored in await self._store.list_credentials(None):
            if stored.key_id == self._keyring.current_id:
                done = replace(done, current=done.current + 1)
                continue
            try:
                clear = self._open(stored)
            except CredentialError:
                done = replace(done, unreadable=(*done.unreadable, stored.key))
                continue
            again = self._seal(
                stored.key,
                clear.access_token,
                clear.refresh_token,
                stored.expires_at,
                stored.scopes,
                stored.created_at,
            )
            if await self._store.reseal_credential(again, stored.access):
                done = replace(done, resealed=done.resealed + 1)
            else:
                done = replace(done, changed=done.changed + 1)
        return done
