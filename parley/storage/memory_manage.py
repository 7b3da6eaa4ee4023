"""The in-memory store's titles and tags, and its retention sweeps (the same queries as
sqlite_manage.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from parley.ids import SessionId
from parley.storage.base import (
    ENDED_STATUSES,
    RETENTION_ACTION,
    RETENTION_PRINCIPAL,
    AuditRecord,
    SessionRecord,
    SweepRule,
    retention_detail,
)
from parley.storage.memory_access import delete_rows
from parley.storage.memory_tables import row
from parley.storage.memory_tasks import MemoryTasks


def _swept(session: SessionRecord, rule: SweepRule, now: float) -> bool:
    if session.lease_owner is not None and (session.lease_expires_at or 0) > now:
        return False
    if session.status in ENDED_STATUSES:
        return rule.ended_before is not None and session.updated_at < rule.ended_before
    return session.status == "idle" and rule.idle_before is not None and session.updated_at < rule.idle_before


class MemoryManage(MemoryTasks):
    async def set_labels(self, session_id: SessionId, title: str | None, tags: Sequence[str]) -> bool:
        async with self._db.write() as tables:
            session = tables.sessions.get(session_id)
            if session is None:
                return False
            tables.sessions[session_id] = row(replace(session, title=title, tags=list(tags)))
            return True

    async def propose_title(self, session_id: SessionId, title: str) -> bool:
        async with self._db.write() as tables:
            session = tables.sessions.get(session_id)
            if session is None or session.title is not None:
                return False
            tables.sessions[session_id] = row(replace(session, title=title))
            return True

    async def sweep_sessions(self, rule: SweepRule, now: float, limit: int) -> list[SessionRecord]:
        async with self._db.write() as tables:
            found = sorted(
                (s for s in tables.sessions.values() if _swept(s, rule, now)), key=lambda s: s.updated_at
            )[: max(limit, 0)]
            for session in found:
                delete_rows(tables, session.id)
                entry_id = tables.audit_seq.get("audit", 0) + 1
                tables.audit_seq["audit"] = entry_id
                tables.audit[entry_id] = row(
                    AuditRecord(
                        id=entry_id,
                        at=now,
                        principal=RETENTION_PRINCIPAL,
                        client=None,
                        action=RETENTION_ACTION,
                        outcome="ok",
                        session_id=session.id,
                        target=None,
                        detail=retention_detail(session),
                    )
                )
            return [row(s) for s in found]

    async def purge_events(self, before: float, limit: int) -> int:
        async with self._db.write() as tables:
            doomed = [
                key
                for key, event in tables.events.items()
                if event.created_at < before
                and (session := tables.sessions.get(event.session_id)) is not None
                and session.status != "running"
            ][: max(limit, 0)]
            for key in doomed:
                del tables.events[key]
            return len(doomed)
