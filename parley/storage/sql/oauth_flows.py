"""Pending authorizations at downstream servers for both backends (runtime/oauth/flows.py): one
row per flow, its state and browser binding as digests and its PKCE verifier encrypted; used once,
by one conditional update."""

from __future__ import annotations

from parley.core.credentials import Sealed
from parley.core.oauth_flows import OAuthFlow
from parley.storage.sql.base import SqlBase
from parley.storage.sql.program import Row, Stmt

_COLUMNS = (
    "id, principal, server, session_id, interrupt_id, scopes, state_digest, binding_digest, issuer, key_id, "
    "verifier_nonce, verifier_ciphertext, created_at, expires_at, used_at"
)


class SqlOAuthFlows(SqlBase):
    async def registered_client(self, server: str, issuer: str) -> str | None:
        row = await self._row(
            "SELECT client_id FROM oauth_clients WHERE server = ? AND issuer = ?", (server, issuer)
        )
        return str(row[0]) if row is not None else None

    async def keep_registered_client(self, server: str, issuer: str, client_id: str, now: float) -> str:
        await self._change(
            Stmt(
                "INSERT INTO oauth_clients (server, issuer, client_id, registered_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (server, issuer) DO NOTHING",
                (server, issuer, client_id, now),
            )
        )
        kept = await self.registered_client(server, issuer)
        assert kept is not None  # just written, or written first by another replica
        return kept

    def _flow(self, row: Row) -> OAuthFlow:
        verifier = None if row[10] is None else Sealed(nonce=bytes(row[10]), ciphertext=bytes(row[11]))
        return OAuthFlow(
            id=row[0],
            principal=row[1],
            server=row[2],
            session_id=row[3],
            interrupt_id=row[4],
            scopes=tuple(self.dialect.load_json(row[5])),
            state_digest=row[6],
            binding_digest=row[7],
            issuer=row[8],
            key_id=row[9],
            verifier=verifier,
            created_at=float(row[12]),
            expires_at=float(row[13]),
            used_at=None if row[14] is None else float(row[14]),
        )

    async def put_flow(self, flow: OAuthFlow) -> None:
        await self._change(
            Stmt(
                f"INSERT INTO oauth_flows ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, NULL, "
                "NULL, ?, ?, NULL)",
                (
                    flow.id,
                    flow.principal,
                    flow.server,
                    flow.session_id,
                    flow.interrupt_id,
                    self.dialect.json(list(flow.scopes)),
                    flow.created_at,
                    flow.expires_at,
                ),
            )
        )

    async def get_flow(self, flow_id: str) -> OAuthFlow | None:
        row = await self._row(f"SELECT {_COLUMNS} FROM oauth_flows WHERE id = ?", (flow_id,))
        return self._flow(row) if row is not None else None

    async def flow_by_state(self, state_digest: str) -> OAuthFlow | None:
        row = await self._row(f"SELECT {_COLUMNS} FROM oauth_flows WHERE state_digest = ?", (state_digest,))
        return self._flow(row) if row is not None else None

    async def start_flow(self, flow: OAuthFlow, now: float) -> bool:
        # A second connect (the page reloaded) replaces the state, binding and verifier: the
        # authorization started before cannot come back any more.
        verifier = flow.verifier
        (result,) = await self._change(
            Stmt(
                "UPDATE oauth_flows SET state_digest = ?, binding_digest = ?, issuer = ?, key_id = ?, "
                "verifier_nonce = ?, verifier_ciphertext = ?, scopes = ? "
                "WHERE id = ? AND used_at IS NULL AND expires_at > ?",
                (
                    flow.state_digest,
                    flow.binding_digest,
                    flow.issuer,
                    flow.key_id,
                    None if verifier is None else verifier.nonce,
                    None if verifier is None else verifier.ciphertext,
                    self.dialect.json(list(flow.scopes)),
                    flow.id,
                    now,
                ),
            )
        )
        return result.count > 0

    async def live_flows(self, principal: str, server: str, now: float) -> list[OAuthFlow]:
        rows = await self._rows(
            f"SELECT {_COLUMNS} FROM oauth_flows WHERE principal = ? AND server = ? AND used_at IS NULL "
            "AND expires_at > ? ORDER BY created_at",
            (principal, server, now),
        )
        return [self._flow(row) for row in rows]

    async def close_flow(self, flow_id: str, now: float) -> bool:
        (result,) = await self._change(
            Stmt("UPDATE oauth_flows SET used_at = ? WHERE id = ? AND used_at IS NULL", (now, flow_id))
        )
        return result.count > 0

    async def use_flow(self, flow_id: str, state_digest: str, now: float) -> bool:
        (result,) = await self._change(
            Stmt(
                "UPDATE oauth_flows SET used_at = ? WHERE id = ? AND state_digest = ? AND used_at IS NULL "
                "AND expires_at > ?",
                (now, flow_id, state_digest, now),
            )
        )
        return result.count > 0
