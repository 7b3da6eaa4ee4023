"""Connected accounts: the credentials a principal holds for downstream servers (per-user OAuth,
docs/credentials.md), as that principal sees and revokes them in `/ui` and over `/v1`. What is
shown of each is its server, issuer, scopes and times, never a token; revoking touches only
the caller's own, and is audited."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from parley.core.credentials import StoredCredential
from parley.errors import InvalidArgument
from parley.runtime import audit
from parley.runtime.access import Principal
from parley.runtime.audit import Audit
from parley.storage.integration_ports import CredentialStore

# The longest server name a caller may name (configured names are short; this bounds the input).
SERVER_NAME_MAX = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectedAccount:
    """One of the caller's credentials, without its tokens."""

    server: str
    issuer: str
    scopes: tuple[str, ...]
    expires_at: float | None
    connected_at: float
    updated_at: float

    @classmethod
    def of(cls, stored: StoredCredential) -> ConnectedAccount:
        return cls(
            server=stored.key.server,
            issuer=stored.key.issuer,
            scopes=stored.scopes,
            expires_at=stored.expires_at,
            connected_at=stored.created_at,
            updated_at=stored.updated_at,
        )


class AccountCommands:
    def __init__(self, store: CredentialStore, trail: Audit, clock: Callable[[], float]) -> None:
        self._store = store
        self._audit = trail
        self._clock = clock

    async def mine(self, caller: Principal) -> list[ConnectedAccount]:
        """The caller's connected accounts, by server and issuer."""
        found = await self._store.list_credentials(caller.id)
        return sorted((ConnectedAccount.of(c) for c in found), key=lambda a: (a.server, a.issuer))

    async def revoke(self, caller: Principal, server: str) -> int:
        """Delete the caller's credentials for `server` (every issuer's); the next call to it asks
        the caller to connect again. Refused, changing nothing, when the caller has none there."""
        if not server or len(server) > SERVER_NAME_MAX:
            raise InvalidArgument(
                "server", "must name one of your connected accounts' servers (GET /v1/accounts)"
            )
        revoked = await self._store.delete_credentials(caller.id, server)
        if revoked == 0:
            raise InvalidArgument(
                "server", f"you have no connected account for '{server}'; GET /v1/accounts lists yours"
            )
        await self._audit.record(
            caller,
            audit.REVOKE_CREDENTIALS,
            session_id=None,
            target=caller.id,
            server=server,
            revoked=revoked,
        )
        return revoked
