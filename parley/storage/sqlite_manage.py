"""The SQLite store's titles and tags, and its retention sweeps: the SessionLabels and
RetentionSweeps ports."""

from __future__ import annotations

from collections.abc import Sequence

from parley.ids import SessionId
from parley.storage.base import (
    ENDED_STATUSES,
    RETENTION_ACTION,
    RETENTION_PRINCIPAL,
    SessionRecord,
    SweepRule,
    retention_detail,
)
from parley.storage.sqlite_access import delete_rows
from parley.storage.sqlite_plumbing import Connection, SqliteBase, dumps
from parley.storage.sqlite_rows import SESSION_COLUMNS, session_row

_ENDED = ", ".join(f"'{status}'" for status in ENDED_STATUSES)


class SqliteManage(SqliteBase):
    async def set_labels(self, session_id: SessionId, title: str | None, tags: Sequence[str]) -> bool:
        def write(db: Connection) -> bool:
            cur = db.execute(
                "UPDATE sessions SET title = ?, tags = ? WHERE id = ?", (title, dumps(list(tags)), session_id)
            )
            return cur.rowcount > 0

        return await self._write(write)

    async def propose_title(self, session_id: SessionId, title: str) -> bool:
        def write(db: Connection) -> bool:
            cur = db.execute(
                "UPDATE sessions SET title = ? WHERE id = ? AND title IS NULL", (title, session_id)
            )
            return cur.rowcount > 0

        return await self._write(write)

    async def sweep_sessions(self, rule: SweepRule, now: float, limit: int) -> list[SessionRecord]:
        def sweep(db: Connection) -> list[SessionRecord]:
            rows = db.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE "
                f"((status IN ({_ENDED}) AND updated_at < ?) OR (status = 'idle' AND updated_at < ?)) "
                "AND (lease_owner IS NULL OR coalesce(lease_expires_at, 0) <= ?) "
                "ORDER BY updated_at LIMIT ?",
                (rule.ended_before, rule.idle_before, now, limit),
            ).fetchall()
            swept = [session_row(r) for r in rows]
            for session in swept:
                delete_rows(db, session.id)
                db.execute(
                    "INSERT INTO audit (at, principal, client, action, outcome, session_id, target, detail) "
                    "VALUES (?, ?, NULL, ?, 'ok', ?, NULL, ?)",
                    (
                        now,
                        RETENTION_PRINCIPAL,
                        RETENTION_ACTION,
                        session.id,
                        dumps(retention_detail(session)),
                    ),
                )
            return swept

        return await self._write(sweep)

    async def purge_events(self, before: float, limit: int) -> int:
        def purge(db: Connection) -> int:
            return db.execute(
                "DELETE FROM events WHERE rowid IN (SELECT e.rowid FROM events e "
                "JOIN sessions s ON s.id = e.session_id WHERE e.created_at < ? AND s.status != 'running' "
                "LIMIT ?)",
                (before, limit),
            ).rowcount

        return await self._write(purge)
