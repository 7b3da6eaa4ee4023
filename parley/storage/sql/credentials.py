"""Per-principal credentials for both backends: ciphertexts by (principal, server, issuer), never
a clear token (parley/runtime/credentials.py encrypts and decrypts), and the refresh claim that
lets one replica at a time spend a refresh token (docs/credentials.md)."""

from __future__ import annotations

from typing import Any

from parley.core.credentials import CredentialKey, Sealed, StoredCredential
from parley.storage.sql.base import SqlBase
from parley.storage.sql.program import Row, Stmt

_COLUMNS = (
    "principal, server, issuer, key_id, access_nonce, access_ciphertext, refresh_nonce, refresh_ciphertext, "
    "scopes, expires_at, claimed_by, claimed_until, created_at, updated_at"
)
_KEY = "principal = ? AND server = ? AND issuer = ?"
# What a save, a finished refresh and a rotation write of a credential.
_SEALED = "key_id = ?, access_nonce = ?, access_ciphertext = ?, refresh_nonce = ?, refresh_ciphertext = ?"


def _key_params(key: CredentialKey) -> tuple[str, str, str]:
    return (key.principal, key.server, key.issuer)


def _sealed_params(credential: StoredCredential) -> tuple[Any, ...]:
    refresh = credential.refresh
    return (
        credential.key_id,
        credential.access.nonce,
        credential.access.ciphertext,
        None if refresh is None else refresh.nonce,
        None if refresh is None else refresh.ciphertext,
    )


class SqlCredentials(SqlBase):
    def _credential(self, row: Row) -> StoredCredential:
        refresh = None if row[6] is None else Sealed(nonce=bytes(row[6]), ciphertext=bytes(row[7]))
        return StoredCredential(
            key=CredentialKey(principal=row[0], server=row[1], issuer=row[2]),
            key_id=row[3],
            access=Sealed(nonce=bytes(row[4]), ciphertext=bytes(row[5])),
            refresh=refresh,
            scopes=tuple(self.dialect.load_json(row[8])),
            expires_at=None if row[9] is None else float(row[9]),
            claimed_by=row[10],
            claimed_until=None if row[11] is None else float(row[11]),
            created_at=float(row[12]),
            updated_at=float(row[13]),
        )

    async def put_credential(self, credential: StoredCredential) -> None:
        # A new authorization replaces the tokens and ends any refresh claim: a refresh that was
        # under way spent the old refresh token, and its late result must not overwrite these.
        await self._change(
            Stmt(
                f"INSERT INTO credentials ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?) "
                "ON CONFLICT (principal, server, issuer) DO UPDATE SET key_id = excluded.key_id, "
                "access_nonce = excluded.access_nonce, access_ciphertext = excluded.access_ciphertext, "
                "refresh_nonce = excluded.refresh_nonce, refresh_ciphertext = excluded.refresh_ciphertext, "
                "scopes = excluded.scopes, expires_at = excluded.expires_at, claimed_by = NULL, "
                "claimed_until = NULL, updated_at = excluded.updated_at",
                (
                    *_key_params(credential.key),
                    *_sealed_params(credential),
                    self.dialect.json(list(credential.scopes)),
                    credential.expires_at,
                    credential.created_at,
                    credential.updated_at,
                ),
            )
        )

    async def get_credential(self, key: CredentialKey) -> StoredCredential | None:
        row = await self._row(f"SELECT {_COLUMNS} FROM credentials WHERE {_KEY}", _key_params(key))
        return self._credential(row) if row is not None else None

    async def list_credentials(self, principal: str | None) -> list[StoredCredential]:
        where, params = ("WHERE principal = ? ", (principal,)) if principal is not None else ("", ())
        rows = await self._rows(
            f"SELECT {_COLUMNS} FROM credentials {where}ORDER BY principal, server, issuer", params
        )
        return [self._credential(row) for row in rows]

    async def delete_credentials(self, principal: str, server: str | None) -> int:
        if server is None:
            stmt = Stmt("DELETE FROM credentials WHERE principal = ?", (principal,))
        else:
            stmt = Stmt("DELETE FROM credentials WHERE principal = ? AND server = ?", (principal, server))
        (result,) = await self._change(stmt)
        return result.count

    async def claim_refresh(
        self, key: CredentialKey, claimant: str, now: float, claim_s: float
    ) -> StoredCredential | None:
        # One conditional UPDATE (core.credentials.may_claim): on PostgreSQL a second claimant
        # waits on the row lock the first one's update holds, then finds the claim taken; on
        # SQLite the one writer orders them the same way.
        (result,) = await self._change(
            Stmt(
                f"UPDATE credentials SET claimed_by = ?, claimed_until = ? WHERE {_KEY} AND "
                "(claimed_by IS NULL OR claimed_by = ? OR claimed_until IS NULL OR claimed_until < ?) "
                f"RETURNING {_COLUMNS}",
                (claimant, now + claim_s, *_key_params(key), claimant, now),
            )
        )
        return self._credential(result.rows[0]) if result.rows else None

    async def finish_refresh(self, credential: StoredCredential, claimant: str) -> bool:
        (result,) = await self._change(
            Stmt(
                f"UPDATE credentials SET {_SEALED}, scopes = ?, expires_at = ?, updated_at = ?, "
                f"claimed_by = NULL, claimed_until = NULL WHERE {_KEY} AND claimed_by = ?",
                (
                    *_sealed_params(credential),
                    self.dialect.json(list(credential.scopes)),
                    credential.expires_at,
                    credential.updated_at,
                    *_key_params(credential.key),
                    claimant,
                ),
            )
        )
        return result.count > 0

    async def release_refresh(self, key: CredentialKey, claimant: str) -> bool:
        (result,) = await self._change(
            Stmt(
                f"UPDATE credentials SET claimed_by = NULL, claimed_until = NULL WHERE {_KEY} AND claimed_by = ?",
                (*_key_params(key), claimant),
            )
        )
        return result.count > 0

    async def reseal_credential(self, credential: StoredCredential, previous: Sealed) -> bool:
        # Only while the row still holds the ciphertext that was read (a nonce is never used
        # twice): a save or a refresh in between wrote newer tokens, which stay.
        (result,) = await self._change(
            Stmt(
                f"UPDATE credentials SET {_SEALED} WHERE {_KEY} AND access_nonce = ?",
                (*_sealed_params(credential), *_key_params(credential.key), previous.nonce),
            )
        )
        return result.count > 0
