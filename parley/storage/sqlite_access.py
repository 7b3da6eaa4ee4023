"""The SQLite store's queries across owners (fair use, pending interrupts, deleting a session)
and its audit trail: the OwnerQueries and AuditLog ports."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, cast

from parley.ids import SessionId
from parley.storage.base import AuditOutcome, AuditRecord, DeleteOutcome, PendingInterrupt
from parley.storage.sqlite_plumbing import Connection, SqliteBase, dumps
from parley.storage.sqlite_rows import INTERRUPT_COLUMNS, interrupt_row

_AUDIT_COLUMNS = "id, at, principal, client, action, outcome, session_id, target, detail"
# A session's rows, children before the session itself (its attachment bytes stay until the
# collector finds that no session refers to them).
SESSION_TABLES = (
    "attachment_refs",
    "messages",
    "events",
    "steps",
    "summaries",
    "interrupts",
    "tool_calls",
    "queued_messages",
    "turns",
)


def delete_rows(db: Connection, session_id: str) -> None:
    """Every row of the session, its MCP tasks, then the session itself (not its audit entries)."""
    for table in SESSION_TABLES:
        db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
    db.execute("DELETE FROM tasks WHERE session_id = ?", (session_id,))
    db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))


_PENDING = ", ".join(f"i.{c.strip()}" for c in INTERRUPT_COLUMNS.split(","))


def insert_audit(db: Connection, entries: Sequence[AuditRecord]) -> None:
    db.executemany(
        "INSERT INTO audit (at, principal, client, action, outcome, session_id, target, detail) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (e.at, e.principal, e.client, e.action, e.outcome, e.session_id, e.target, dumps(e.detail))
            for e in entries
        ],
    )


def _audit(row: sqlite3.Row) -> AuditRecord:
    return AuditRecord(
        id=row["id"],
        at=row["at"],
        principal=row["principal"],
        client=row["client"],
        action=row["action"],
        outcome=cast(AuditOutcome, row["outcome"]),
        session_id=SessionId(row["session_id"]) if row["session_id"] else None,
        target=row["target"],
        detail=json.loads(row["detail"]),
    )


class SqliteAccess(SqliteBase):
    async def count_running(self, owner: str) -> int:
        row = await self._fetchone(
            "SELECT count(*) FROM sessions WHERE owner = ? AND status = 'running' "
            "AND (phase IS NULL OR phase != 'waiting')",
            (owner,),
        )
        return int(row[0]) if row is not None else 0

    async def list_pending_for(
        self, owner: str | None, agents: Sequence[str] | None, limit: int
    ) -> list[PendingInterrupt]:
        where: list[str] = []
        params: list[Any] = []
        if owner is not None:
            where.append("s.owner = ?")
            params.append(owner)
        if agents:
            where.append(f"s.agent IN ({', '.join('?' * len(agents))})")
            params.extend(agents)
        if owner is None and agents is not None and not agents:
            return []
        scope = f"AND ({' OR '.join(where)})" if where else ""
        rows = await self._fetchall(
            f"SELECT {_PENDING}, s.agent AS session_agent, s.owner AS session_owner FROM interrupts i "
            f"JOIN sessions s ON s.id = i.session_id WHERE i.status = 'pending' {scope} "
            "ORDER BY i.created_at, i.id LIMIT ?",
            (*params, limit),
        )
        return [
            PendingInterrupt(interrupt=interrupt_row(r), agent=r["session_agent"], owner=r["session_owner"])
            for r in rows
        ]

    async def delete_session(self, session_id: SessionId, now: float) -> DeleteOutcome:
        def delete(db: Connection) -> DeleteOutcome:
            row = db.execute(
                "SELECT status, lease_owner, lease_expires_at FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                return "not_found"
            leased = row["lease_owner"] is not None and (row["lease_expires_at"] or 0) > now
            if row["status"] == "running" or leased:
                return "busy"
            delete_rows(db, session_id)
            return "deleted"

        return await self._write(delete)

    # ------------------------------------------------------------------ the audit trail

    async def record_audit(self, entry: AuditRecord) -> None:
        await self._write(lambda db: insert_audit(db, [entry]))

    async def list_audit(
        self, session_id: str | None, principal: str | None, before_id: int | None, limit: int
    ) -> list[AuditRecord]:
        where = ["1 = 1"]
        params: list[Any] = []
        for column, value in (("session_id", session_id), ("principal", principal)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if before_id is not None:
            where.append("id < ?")
            params.append(before_id)
        rows = await self._fetchall(
            f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [_audit(r) for r in rows]

    async def purge_audit(self, before: float) -> int:
        def purge(db: Connection) -> int:
            return db.execute("DELETE FROM audit WHERE at < ?", (before,)).rowcount

        return await self._write(purge)
