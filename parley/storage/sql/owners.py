"""Written once for both databases: queries across owners (fair use, pending interrupts, deleting
a session), the audit trail, titles and tags, and retention sweeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parley.core.ids import SessionId
from parley.core.records import (
    RETENTION_ACTION,
    RETENTION_PRINCIPAL,
    AuditRecord,
    DeleteOutcome,
    PendingInterrupt,
    SessionRecord,
    SweepRule,
    retention_detail,
)
from parley.storage.sql.base import SqlBase
from parley.storage.sql.conditions import BUSY, LEASE_LIVE, NOT_RUNNING, PENDING, SWEEPABLE
from parley.storage.sql.program import Batch, Program, Stmt
from parley.storage.sql.rows import (
    FIELDS,
    SESSION_COLUMNS,
    listing,
)
from parley.storage.sql.steps import INSERT_AUDIT, audit_params

# A session's rows, children before the session itself (its attachment bytes stay until the
# collector finds that no session refers to them), and its MCP tasks. The audit keeps its entries.
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
    "tasks",
)


def delete_statements(condition: str, params: Sequence[Any]) -> list[Stmt]:
    """Every row of the sessions whose ids `condition` selects, then those sessions."""
    deletes = [Stmt(f"DELETE FROM {table} WHERE session_id {condition}", params) for table in SESSION_TABLES]
    return [*deletes, Stmt(f"DELETE FROM sessions WHERE id {condition}", params)]


class SqlOwners(SqlBase):
    # ------------------------------------------------------------------ across owners

    def _owned_or_approved(
        self, owner: str | None, agents: Sequence[str] | None, prefix: str
    ) -> tuple[str, list[Any]]:
        """The condition (with its parameters) of sessions `owner` owns or of the `agents` (both
        None: every session), on the sessions table named by `prefix`."""
        where: list[str] = []
        params: list[Any] = []
        if owner is not None:
            where.append(f"{prefix}owner = ?")
            params.append(owner)
        if agents:
            among, among_params = self.dialect.in_list(f"{prefix}agent", agents)
            where.append(among)
            params.extend(among_params)
        return (f"AND ({' OR '.join(where)})" if where else ""), params

    async def list_pending_for(
        self, owner: str | None, agents: Sequence[str] | None, limit: int
    ) -> list[PendingInterrupt]:
        if owner is None and agents is not None and not agents:
            return []
        scope, params = self._owned_or_approved(owner, agents, "s.")
        rows = await self._rows(
            f"SELECT {listing('interrupts', 'i')}, s.agent, s.owner FROM interrupts i "
            f"JOIN sessions s ON s.id = i.session_id WHERE i.{PENDING} {scope} "
            "ORDER BY i.created_at, i.id LIMIT ?",
            (*params, self.dialect.limit(limit)),
        )
        width = len(FIELDS["interrupts"])
        return [
            PendingInterrupt(interrupt=self.codec.interrupt(r[:width]), agent=r[width], owner=r[width + 1])
            for r in rows
        ]

    async def list_drafts_for(
        self, owner: str | None, agents: Sequence[str] | None, limit: int
    ) -> list[SessionRecord]:
        if owner is None and agents is not None and not agents:
            return []
        scope, params = self._owned_or_approved(owner, agents, "")
        rows = await self._rows(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE plan_status = 'draft' AND status = 'idle' "
            f"{scope} ORDER BY updated_at, id LIMIT ?",
            (*params, self.dialect.limit(limit)),
        )
        return [self.codec.session(r) for r in rows]

    async def delete_session(self, session_id: SessionId, now: float) -> DeleteOutcome:
        return await self._execute(self._deleting(session_id, now), write=True)

    def _deleting(self, session_id: SessionId, now: float) -> Program[DeleteOutcome]:
        (found,) = yield Batch(
            [Stmt(f"SELECT {BUSY} FROM sessions WHERE id = ?{self.dialect.for_update}", (now, session_id))],
            writes=False,
        )
        if not found.rows:
            return "not_found"
        if found.rows[0][0]:
            return "busy"
        yield Batch(delete_statements("= ?", (session_id,)), last=True)
        return "deleted"

    # ------------------------------------------------------------------ the audit trail

    async def record_audit(self, entry: AuditRecord) -> None:
        await self._change(Stmt(INSERT_AUDIT, audit_params(self.codec, entry)))

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
        rows = await self._rows(
            f"SELECT {listing('audit')} FROM audit WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
            (*params, self.dialect.limit(limit)),
        )
        return [self.codec.audit(r) for r in rows]

    async def purge_audit(self, before: float) -> int:
        (gone,) = await self._change(Stmt("DELETE FROM audit WHERE at < ?", (before,)))
        return gone.count

    # ------------------------------------------------------------------ titles and tags

    async def set_labels(self, session_id: SessionId, title: str | None, tags: Sequence[str]) -> bool:
        param = self.codec.param
        (changed,) = await self._change(
            Stmt(
                "UPDATE sessions SET title = ?, tags = ? WHERE id = ?",
                (param("sessions", "title", title), param("sessions", "tags", list(tags)), session_id),
            )
        )
        return changed.count > 0

    async def propose_title(self, session_id: SessionId, title: str) -> bool:
        (changed,) = await self._change(
            Stmt(
                "UPDATE sessions SET title = ? WHERE id = ? AND title IS NULL",
                (self.codec.param("sessions", "title", title), session_id),
            )
        )
        return changed.count > 0

    # ------------------------------------------------------------------ retention

    async def sweep_sessions(self, rule: SweepRule, now: float, limit: int) -> list[SessionRecord]:
        return await self._execute(self._sweeping(rule, now, limit), write=True)

    def _sweeping(self, rule: SweepRule, now: float, limit: int) -> Program[list[SessionRecord]]:
        # The sessions chosen and locked (on PostgreSQL a row another process holds is skipped, so
        # processes sweeping at once take different rows and none waits for a turn).
        (chosen,) = yield Batch(
            [
                Stmt(
                    f"SELECT {SESSION_COLUMNS} FROM sessions WHERE {SWEEPABLE} AND NOT {LEASE_LIVE} "
                    f"ORDER BY updated_at LIMIT ?{self.dialect.skip_locked}",
                    (rule.ended_before, rule.idle_before, now, self.dialect.limit(limit)),
                )
            ],
            writes=False,
        )
        swept = [self.codec.session(r) for r in chosen.rows]
        if not swept:
            return swept
        among, params = self.dialect.in_list("", [s.id for s in swept])
        entries = [
            AuditRecord(
                id=0,
                at=now,
                principal=RETENTION_PRINCIPAL,
                client=None,
                action=RETENTION_ACTION,
                outcome="ok",
                session_id=s.id,
                target=None,
                detail=retention_detail(s),
            )
            for s in swept
        ]
        audit = Stmt(INSERT_AUDIT, many=[audit_params(self.codec, e) for e in entries])
        yield Batch([*delete_statements(among, params), audit], last=True)
        return swept

    async def purge_events(self, before: float, limit: int) -> int:
        # Events of sessions not running a turn (the transcript and the sessions' numbers stay).
        (gone,) = await self._change(
            Stmt(
                "DELETE FROM events WHERE (session_id, seq) IN (SELECT e.session_id, e.seq FROM events e "
                f"JOIN sessions s ON s.id = e.session_id WHERE e.created_at < ? AND s.{NOT_RUNNING} "
                f"LIMIT ?{self.dialect.skip_locked_of('e')})",
                (before, self.dialect.limit(limit)),
            )
        )
        return gone.count
