"""The PostgreSQL store's titles and tags, and its retention sweeps (the same queries as
sqlite_manage.py). A sweep's rows are locked with SKIP LOCKED: replicas sweeping at once take
different rows, and none waits for a row a turn or another sweep holds."""

from __future__ import annotations

from collections.abc import Sequence

from parley.ids import SessionId
from parley.storage.base import (
    ENDED_STATUSES,
    RETENTION_ACTION,
    RETENTION_PRINCIPAL,
    SessionRecord,
    SweepRule,
)
from parley.storage.postgres_access import DELETE_ROWS_OF_TARGET
from parley.storage.postgres_plumbing import PostgresBase
from parley.storage.postgres_rows import SESSION_FIELDS, json_value, listing, session_row
from parley.storage.postgres_tasks import page_limit

_ENDED = ", ".join(f"'{status}'" for status in ENDED_STATUSES)
_SESSION = listing(SESSION_FIELDS)


class PostgresManage(PostgresBase):
    async def set_labels(self, session_id: SessionId, title: str | None, tags: Sequence[str]) -> bool:
        rows = await self._write(
            "UPDATE sessions SET title = %s, tags = %s WHERE id = %s RETURNING id",
            (json_value(title), json_value(list(tags)), session_id),
        )
        return bool(rows)

    async def propose_title(self, session_id: SessionId, title: str) -> bool:
        rows = await self._write(
            "UPDATE sessions SET title = %s WHERE id = %s AND title IS NULL RETURNING id",
            (json_value(title), session_id),
        )
        return bool(rows)

    async def sweep_sessions(self, rule: SweepRule, now: float, limit: int) -> list[SessionRecord]:
        # One statement: the sessions chosen and locked (a locked one is skipped; a chosen one is
        # checked again once locked), every row of them deleted, the sessions returned as they were.
        rows = await self._write(
            f"WITH target AS (SELECT id FROM sessions WHERE "
            f"((status IN ({_ENDED}) AND updated_at < %(ended)s::float8) "
            "OR (status = 'idle' AND updated_at < %(idle)s::float8)) "
            "AND (lease_owner IS NULL OR coalesce(lease_expires_at, 0) <= %(now)s) "
            "ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
            f"{DELETE_ROWS_OF_TARGET}, "
            f"gone AS (DELETE FROM sessions WHERE id IN (SELECT id FROM target) RETURNING {_SESSION}), "
            "audited AS (INSERT INTO audit (at, principal, client, action, outcome, session_id, target, detail) "
            "SELECT %(now)s, %(who)s, NULL, %(action)s, 'ok', id, NULL, "
            "json_build_object('owner', owner, 'agent', agent, 'status', status) FROM gone) "
            "SELECT * FROM gone",
            {
                "ended": rule.ended_before,
                "idle": rule.idle_before,
                "now": now,
                "limit": page_limit(limit),
                "who": RETENTION_PRINCIPAL,
                "action": RETENTION_ACTION,
            },
        )
        return [session_row(r) for r in rows]

    async def purge_events(self, before: float, limit: int) -> int:
        rows = await self._write(
            "WITH doomed AS (SELECT e.session_id, e.seq FROM events e JOIN sessions s ON s.id = e.session_id "
            "WHERE e.created_at < %s AND s.status != 'running' LIMIT %s FOR UPDATE OF e SKIP LOCKED), "
            "gone AS (DELETE FROM events e USING doomed d WHERE e.session_id = d.session_id AND e.seq = d.seq "
            "RETURNING 1) SELECT count(*) FROM gone",
            (before, page_limit(limit)),
        )
        return int(rows[0][0]) if rows else 0
