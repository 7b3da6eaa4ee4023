"""The PostgreSQL store's queries across owners and its audit trail (the same queries as
sqlite_access.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parley.ids import SessionId
from parley.storage.base import AuditRecord, DeleteOutcome, PendingInterrupt
from parley.storage.postgres_plumbing import PostgresBase
from parley.storage.postgres_rows import INTERRUPT_FIELDS, interrupt_row, json_value
from parley.storage.postgres_tasks import page_limit

_AUDIT_FIELDS = ("id", "at", "principal", "client", "action", "outcome", "session_id", "target", "detail")
_AUDIT = ", ".join(_AUDIT_FIELDS)
_PENDING = ", ".join(f"i.{c}" for c in INTERRUPT_FIELDS)
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

# The statement parts that delete every row of the sessions in a CTE named `target`, and their
# MCP tasks (the sessions themselves are deleted by the statement's last part).
DELETE_ROWS_OF_TARGET = ", ".join(
    f"d_{table} AS (DELETE FROM {table} WHERE session_id IN (SELECT id FROM target))"
    for table in (*SESSION_TABLES, "tasks")
)


INSERT_AUDIT = (
    "INSERT INTO audit (at, principal, client, action, outcome, session_id, target, detail) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)


def audit_values(e: AuditRecord) -> tuple[Any, ...]:
    return (e.at, e.principal, e.client, e.action, e.outcome, e.session_id, e.target, json_value(e.detail))


def _audit(row: Sequence[Any]) -> AuditRecord:
    values = dict(zip(_AUDIT_FIELDS, row, strict=True))
    values["session_id"] = values["session_id"] or None
    return AuditRecord(**values)


class PostgresAccess(PostgresBase):
    async def count_running(self, owner: str) -> int:
        row = await self._fetchone(
            "SELECT count(*) FROM sessions WHERE owner = %s AND status = 'running' "
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
            where.append("s.owner = %s")
            params.append(owner)
        if agents:
            where.append("s.agent = ANY(%s)")
            params.append(list(agents))
        if owner is None and agents is not None and not agents:
            return []
        scope = f"AND ({' OR '.join(where)})" if where else ""
        rows = await self._fetchall(
            f"SELECT {_PENDING}, s.agent, s.owner FROM interrupts i JOIN sessions s ON s.id = i.session_id "
            f"WHERE i.status = 'pending' {scope} ORDER BY i.created_at, i.id LIMIT %s",
            (*params, page_limit(limit)),
        )
        width = len(INTERRUPT_FIELDS)
        return [
            PendingInterrupt(interrupt=interrupt_row(r[:width]), agent=r[width], owner=r[width + 1])
            for r in rows
        ]

    async def delete_session(self, session_id: SessionId, now: float) -> DeleteOutcome:
        # One statement: the session row locked and checked, then every row of it deleted (the
        # foreign keys are checked at the end of the statement, when the children are gone too).
        deletes = DELETE_ROWS_OF_TARGET
        rows = await self._write(
            "WITH target AS (SELECT id FROM sessions WHERE id = %s AND status != 'running' "
            "AND (lease_owner IS NULL OR coalesce(lease_expires_at, 0) <= %s) FOR UPDATE), "
            f"{deletes}, "
            "gone AS (DELETE FROM sessions WHERE id IN (SELECT id FROM target) RETURNING id) "
            "SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM sessions WHERE id = %s)",
            (session_id, now, session_id),
        )
        deleted, existed = rows[0] if rows else (0, 0)
        if deleted:
            return "deleted"
        return "busy" if existed else "not_found"

    # ------------------------------------------------------------------ the audit trail

    async def record_audit(self, entry: AuditRecord) -> None:
        await self._write(INSERT_AUDIT, audit_values(entry))

    async def list_audit(
        self, session_id: str | None, principal: str | None, before_id: int | None, limit: int
    ) -> list[AuditRecord]:
        where = ["TRUE"]
        params: list[Any] = []
        for column, value in (("session_id", session_id), ("principal", principal)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        if before_id is not None:
            where.append("id < %s")
            params.append(before_id)
        rows = await self._fetchall(
            f"SELECT {_AUDIT} FROM audit WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT %s",
            (*params, page_limit(limit)),
        )
        return [_audit(r) for r in rows]

    async def purge_audit(self, before: float) -> int:
        rows = await self._write(
            "WITH gone AS (DELETE FROM audit WHERE at < %s RETURNING 1) SELECT count(*) FROM gone", (before,)
        )
        return int(rows[0][0]) if rows else 0
