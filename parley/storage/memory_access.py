"""The in-memory store's queries across owners and its audit trail (the same queries as
sqlite_access.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from parley.ids import SessionId
from parley.storage.base import AuditRecord, DeleteOutcome, PendingInterrupt
from parley.storage.memory_attachments import MemoryAttachments
from parley.storage.memory_tables import MemoryTables, row


def delete_rows(tables: MemoryTables, session_id: SessionId) -> None:
    """Every row of the session, its MCP tasks, then the session itself (not its audit entries)."""
    for name in ("turns", "calls", "interrupts", "queued", "tasks"):
        table = getattr(tables, name)
        for key in [k for k, v in table.items() if v.session_id == session_id]:
            del table[key]
    for name in ("messages", "events", "summaries"):
        table = getattr(tables, name)
        for key in [k for k in table if k[0] == session_id]:
            del table[key]
    for key in [k for k, v in tables.steps.items() if v.session_id == session_id]:
        del tables.steps[key]
    for key in [k for k in tables.attachment_refs if k[0] == session_id]:
        del tables.attachment_refs[key]  # the bytes go with the collector once nothing refers to them
    tables.counters.pop(session_id, None)
    del tables.sessions[session_id]


def insert_audit(tables: MemoryTables, entry: AuditRecord) -> None:
    entry_id = tables.audit_seq.get("audit", 0) + 1
    tables.audit_seq["audit"] = entry_id
    tables.audit[entry_id] = row(replace(entry, id=entry_id))


class MemoryAccess(MemoryAttachments):
    async def count_running(self, owner: str) -> int:
        sessions = (await self._committed()).sessions.values()
        return sum(1 for s in sessions if s.owner == owner and s.status == "running" and s.phase != "waiting")

    async def list_pending_for(
        self, owner: str | None, agents: Sequence[str] | None, limit: int
    ) -> list[PendingInterrupt]:
        tables = await self._committed()
        if owner is None and agents is not None and not agents:
            return []
        found = []
        for interrupt in sorted(tables.interrupts.values(), key=lambda i: (i.created_at, i.id)):
            session = tables.sessions.get(interrupt.session_id)
            if interrupt.status != "pending" or session is None:
                continue
            everyone = owner is None and agents is None
            if everyone or session.owner == owner or (agents and session.agent in agents):
                found.append(
                    PendingInterrupt(interrupt=row(interrupt), agent=session.agent, owner=session.owner)
                )
        return found[: max(limit, 0)]

    async def delete_session(self, session_id: SessionId, now: float) -> DeleteOutcome:
        async with self._db.write() as tables:
            session = tables.sessions.get(session_id)
            if session is None:
                return "not_found"
            leased = session.lease_owner is not None and (session.lease_expires_at or 0) > now
            if session.status == "running" or leased:
                return "busy"
            delete_rows(tables, session_id)
            return "deleted"

    # ------------------------------------------------------------------ the audit trail

    async def record_audit(self, entry: AuditRecord) -> None:
        async with self._db.write() as tables:
            insert_audit(tables, entry)

    async def list_audit(
        self, session_id: str | None, principal: str | None, before_id: int | None, limit: int
    ) -> list[AuditRecord]:
        entries = [
            e
            for e in (await self._committed()).audit.values()
            if session_id in (None, e.session_id)
            and principal in (None, e.principal)
            and (before_id is None or e.id < before_id)
        ]
        entries.sort(key=lambda e: e.id, reverse=True)
        return [row(e) for e in entries[: max(limit, 0)]]

    async def purge_audit(self, before: float) -> int:
        async with self._db.write() as tables:
            old = [k for k, e in tables.audit.items() if e.at < before]
            for key in old:
                del tables.audit[key]
            return len(old)
