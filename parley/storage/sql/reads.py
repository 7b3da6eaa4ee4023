"""The reads of sessions, turns, calls, the queue, interrupts and agent versions, written once
for both databases (each one statement, outside any decision)."""

from __future__ import annotations

from typing import Any

from parley.core.ids import QueuedMessageId, SessionId, TurnId
from parley.core.records import (
    AgentVersionRecord,
    InterruptRecord,
    MessageRecord,
    QueuedMessageRecord,
    SessionFilter,
    SessionPage,
    SessionRecord,
    ToolCallRecord,
    TurnRecord,
)
from parley.storage.sql.base import SqlBase, page
from parley.storage.sql.conditions import PENDING, QUEUED
from parley.storage.sql.program import Stmt, reads
from parley.storage.sql.rows import (
    CALL_COLUMNS,
    INTERRUPT_COLUMNS,
    QUEUED_COLUMNS,
    SESSION_COLUMNS,
    TURN_COLUMNS,
    listing,
)


class SqlReads(SqlBase):
    async def get_session(self, session_id: SessionId) -> SessionRecord | None:
        row = await self._row(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        return self.codec.session(row) if row is not None else None

    async def list_sessions(
        self,
        owner: str | None,
        status: str | None,
        agent: str | None,
        cursor: str | None,
        limit: int,
        match: SessionFilter | None = None,
    ) -> SessionPage:
        where: list[str] = []
        params: list[Any] = []

        def narrow(condition: str, *values: Any) -> None:
            where.append(condition)
            params.extend(values)

        for column, value in (("owner", owner), ("status", status), ("agent", agent)):
            if value is not None:
                narrow(f"{column} = ?", value)
        if match is not None:
            if match.title is not None:
                narrow(self.dialect.title_contains, match.title)
            if match.tag is not None:
                narrow(self.dialect.has_tag, match.tag)
            if match.created_from is not None:
                narrow("created_at >= ?", match.created_from)
            if match.created_before is not None:
                narrow("created_at < ?", match.created_before)
        if cursor is not None:
            created_at, _, last_id = cursor.partition("|")
            narrow(
                "(created_at < ? OR (created_at = ? AND id < ?))",
                float(created_at),
                float(created_at),
                last_id,
            )
        # One row more than `limit`, to tell whether a next page exists.
        rows = await self._rows(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE {' AND '.join(where) or '1 = 1'} "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit + 1),
        )
        sessions, next_cursor = page(rows, limit, self.codec.session)
        return SessionPage(sessions=sessions, next_cursor=next_cursor)

    async def get_turn(self, turn_id: TurnId) -> TurnRecord | None:
        row = await self._row(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return self.codec.turn(row) if row is not None else None

    async def list_turns(self, session_id: SessionId) -> list[TurnRecord]:
        rows = await self._rows(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return [self.codec.turn(r) for r in rows]

    async def store_agent_version(self, record: AgentVersionRecord) -> None:
        await self._change(
            Stmt(
                "INSERT INTO agent_versions (agent, version, definition, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (agent, version) DO NOTHING",
                (record.agent, record.version, self.dialect.json(record.definition), record.created_at),
            )
        )

    async def get_agent_version(self, agent: str, version: str) -> AgentVersionRecord | None:
        row = await self._row(
            "SELECT agent, version, definition, created_at FROM agent_versions WHERE agent = ? AND version = ?",
            (agent, version),
        )
        if row is None:
            return None
        definition = self.dialect.load_json(row[2])
        return AgentVersionRecord(agent=row[0], version=row[1], definition=definition, created_at=row[3])

    async def list_messages(
        self, session_id: SessionId, from_seq: int | None, limit: int | None
    ) -> list[MessageRecord]:
        sql = f"SELECT {listing('messages')} FROM messages WHERE session_id = ?"
        params: list[Any] = [session_id]
        if from_seq is not None:
            sql += " AND seq >= ?"
            params.append(from_seq)
        # A whole transcript may be large: read it off the event loop.
        whole = from_seq is None and limit is None
        rows = await self._rows(
            sql + " ORDER BY seq LIMIT ?", (*params, self.dialect.limit(limit)), inline=not whole
        )
        return [self.codec.record("messages", r) for r in rows]

    async def count_messages(self, session_id: SessionId) -> int:
        return await self._count("SELECT count(*) FROM messages WHERE session_id = ?", (session_id,))

    async def list_tool_calls(self, turn_id: TurnId) -> list[ToolCallRecord]:
        rows = await self._rows(
            f"SELECT {CALL_COLUMNS} FROM tool_calls WHERE turn_id = ? ORDER BY step_no, call_index",
            (turn_id,),
        )
        return [self.codec.call(r) for r in rows]

    async def list_queued(self, session_id: SessionId) -> list[QueuedMessageRecord]:
        rows = await self._rows(
            f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND {QUEUED} ORDER BY seq",
            (session_id,),
        )
        return [self.codec.queued(r) for r in rows]

    async def get_queued(self, message_id: QueuedMessageId) -> QueuedMessageRecord | None:
        row = await self._row(f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE id = ?", (message_id,))
        return self.codec.queued(row) if row is not None else None

    async def get_queued_with_session(
        self, message_id: QueuedMessageId, session_id: SessionId
    ) -> tuple[QueuedMessageRecord | None, SessionRecord | None]:
        queued, session = await self._execute(
            reads(
                Stmt(f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE id = ?", (message_id,)),
                Stmt(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)),
            ),
            write=False,
        )
        return (
            self.codec.queued(queued.rows[0]) if queued.rows else None,
            self.codec.session(session.rows[0]) if session.rows else None,
        )

    async def list_interrupts(self, session_id: SessionId, pending_only: bool) -> list[InterruptRecord]:
        sql = f"SELECT {INTERRUPT_COLUMNS} FROM interrupts WHERE session_id = ?"
        if pending_only:
            sql += f" AND {PENDING}"
        rows = await self._rows(sql + " ORDER BY created_at, id", (session_id,))
        return [self.codec.interrupt(r) for r in rows]

    async def list_all_pending(self, limit: int) -> list[InterruptRecord]:
        rows = await self._rows(
            f"SELECT {INTERRUPT_COLUMNS} FROM interrupts WHERE {PENDING} ORDER BY created_at LIMIT ?",
            (self.dialect.limit(limit),),
        )
        return [self.codec.interrupt(r) for r in rows]
