"""The step port on SQLite: a session's snapshot loaded and its changes written in one
`BEGIN IMMEDIATE` transaction (see parley/storage/changes.py). Plain row mapping: no rule."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite

from parley.errors import LeaseLost, StorageError
from parley.ids import SessionId, TurnId
from parley.storage.base import QueuedMessageRecord
from parley.storage.changes import CURRENT_TURN, Changes, SessionSnapshot, SnapshotScope
from parley.storage.sqlite_plumbing import dumps
from parley.storage.sqlite_rows import (
    CALL_COLUMNS,
    INTERRUPT_COLUMNS,
    QUEUED_COLUMNS,
    SESSION_COLUMNS,
    TURN_COLUMNS,
    call_row,
    interrupt_row,
    queued_row,
    session_row,
    turn_row,
)
from parley.storage.sqlite_tasks import SqliteTasks


def _columns(listing: str) -> frozenset[str]:
    return frozenset(c.strip() for c in listing.split(","))


# Per table: the columns a change may write, and those stored as JSON.
_TABLES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "sessions": (_columns(SESSION_COLUMNS), frozenset({"todos", "result", "inputs", "settings"})),
    "turns": (_columns(TURN_COLUMNS), frozenset({"result", "settings"})),
    "tool_calls": (_columns(CALL_COLUMNS), frozenset({"arguments", "result", "remote"})),
    "interrupts": (_columns(INTERRUPT_COLUMNS), frozenset({"payload", "resolution"})),
    "queued_messages": (_columns(QUEUED_COLUMNS), frozenset({"settings"})),
}
# Tables whose rows carry the time of their last change.
_STAMPED = frozenset({"sessions", "tool_calls"})


class _Transaction:
    def __init__(self, store: SqliteSteps, db: aiosqlite.Connection, snapshot: SessionSnapshot) -> None:
        self._store = store
        self._db = db
        self._snapshot = snapshot
        self.durable = False

    @property
    def snapshot(self) -> SessionSnapshot:
        return self._snapshot

    async def apply(self, changes: Changes, now: float) -> None:
        snapshot = self._snapshot
        session_id = snapshot.session.id
        db = self._db
        self.durable = self.durable or changes.durable
        if changes.new_step is not None:
            step = changes.new_step
            try:
                await db.execute(
                    "INSERT INTO steps (session_id, turn_id, step_no, kind, process_id, input_tokens, "
                    "output_tokens, created_at, cached_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        session_id,
                        step.turn_id,
                        step.step_no,
                        step.kind,
                        step.process_id,
                        step.input_tokens,
                        step.output_tokens,
                        now,
                        step.cached_tokens,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise LeaseLost(session_id) from exc
        if changes.new_turn is not None:
            turn = changes.new_turn
            await db.execute(
                "INSERT INTO turns (id, session_id, seq, status, queued_message_id, started_at, ended_at, "
                "settings) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    turn.id,
                    session_id,
                    turn.seq,
                    turn.status,
                    turn.queued_message_id,
                    turn.started_at,
                    turn.ended_at,
                    dumps(turn.settings),
                ),
            )
        for new in changes.new_queued:
            await self._store._insert_queued(db, session_id, new)
        for call in changes.new_calls:
            await db.execute(
                "INSERT INTO tool_calls (id, session_id, turn_id, step_no, call_index, name, arguments, "
                "status, effect, idempotency_key, created_at, updated_at, source, server, tool, "
                "requires_approval) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    call.id,
                    session_id,
                    call.turn_id,
                    call.step_no,
                    call.call_index,
                    call.name,
                    dumps(call.arguments),
                    call.status,
                    call.effect,
                    call.idempotency_key,
                    call.created_at,
                    call.updated_at,
                    call.source,
                    call.server,
                    call.tool,
                    int(call.requires_approval),
                ),
            )
        for interrupt in changes.new_interrupts:
            await db.execute(
                "INSERT INTO interrupts (id, session_id, turn_id, tool_call_id, kind, status, payload, "
                "created_at, deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    interrupt.id,
                    session_id,
                    interrupt.turn_id,
                    interrupt.tool_call_id,
                    interrupt.kind,
                    interrupt.status,
                    dumps(interrupt.payload),
                    interrupt.created_at,
                    interrupt.deadline,
                ),
            )
        if changes.session:
            await self._update("sessions", session_id, changes.session, now)
        if changes.turn:
            if snapshot.turn is None:
                raise StorageError(f"a change to the turn of session {session_id}, which has none loaded")
            await self._update("turns", snapshot.turn.id, changes.turn, now)
        for call_id, fields in changes.calls.items():
            await self._update("tool_calls", call_id, fields, now)
        for interrupt_id, fields in changes.interrupts.items():
            await self._update("interrupts", interrupt_id, fields, now)
        for queued_id, fields in changes.queued.items():
            await self._update("queued_messages", queued_id, fields, now)
        for message in changes.messages:
            await self._store._message(
                self._db, session_id, message.turn_id, message.role, message.content, now
            )
        for event in changes.events:
            await self._store._event(self._db, session_id, event.turn_id, event.kind, event.data, now)

    async def _update(self, table: str, row_id: str, fields: dict[str, Any], now: float) -> None:
        allowed, as_json = _TABLES[table]
        unknown = set(fields) - allowed
        if unknown:
            raise StorageError(f"{table} has no column(s) {', '.join(sorted(unknown))}")
        values = {k: (dumps(v) if k in as_json and v is not None else v) for k, v in fields.items()}
        if table in _STAMPED:
            values.setdefault("updated_at", now)
        assignments = ", ".join(f"{column} = ?" for column in values)
        await self._db.execute(f"UPDATE {table} SET {assignments} WHERE id = ?", (*values.values(), row_id))


class SqliteSteps(SqliteTasks):
    """`session_transaction` of the step port, for the SQLite store, and the appends to a
    session's transcript and events (each numbered in the session's own sequence)."""

    @staticmethod
    async def _next_seq(db: aiosqlite.Connection, session_id: SessionId, column: str) -> int:
        async with db.execute(
            f"UPDATE sessions SET {column} = {column} + 1 WHERE id = ? RETURNING {column}", (session_id,)
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            raise StorageError(f"session {session_id} vanished from the database")
        return int(row[0])

    async def _event(
        self,
        db: aiosqlite.Connection,
        session_id: SessionId,
        turn_id: TurnId | None,
        kind: str,
        data: dict[str, Any],
        now: float,
    ) -> None:
        seq = await self._next_seq(db, session_id, "event_seq")
        await db.execute(
            "INSERT INTO events (session_id, seq, turn_id, kind, data, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, seq, turn_id, kind, dumps(data), now),
        )

    async def _message(
        self,
        db: aiosqlite.Connection,
        session_id: SessionId,
        turn_id: TurnId | None,
        role: str,
        content: dict[str, Any],
        now: float,
    ) -> int:
        seq = await self._next_seq(db, session_id, "message_seq")
        await db.execute(
            "INSERT INTO messages (session_id, seq, turn_id, role, content, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, seq, turn_id, role, dumps(content), now),
        )
        return seq

    async def _insert_queued(
        self, db: aiosqlite.Connection, session_id: SessionId, message: QueuedMessageRecord
    ) -> None:
        """A new queued message, numbered in the session's queue."""
        seq = await self._next_seq(db, session_id, "queue_seq")
        await db.execute(
            "INSERT INTO queued_messages (id, session_id, seq, text, status, turn_id, created_at, "
            "client_message_id, steer, settings) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                message.id,
                session_id,
                seq,
                message.text,
                message.status,
                message.turn_id,
                message.created_at,
                message.client_message_id,
                int(message.steer),
                dumps(message.settings) if message.settings is not None else None,
            ),
        )

    @asynccontextmanager
    async def session_transaction(
        self, session_id: SessionId, scope: SnapshotScope = CURRENT_TURN, *, lease: str | None = None
    ) -> AsyncIterator[_Transaction | None]:
        transaction = None
        async with self._tx() as db:
            snapshot = await self._snapshot(db, session_id, scope)
            if snapshot is None:
                yield None
                return
            if lease is not None and snapshot.session.lease_owner != lease:
                raise LeaseLost(session_id)
            transaction = _Transaction(self, db, snapshot)
            yield transaction
        if transaction.durable:
            await self._make_durable()

    @staticmethod
    async def _snapshot(
        db: aiosqlite.Connection, session_id: SessionId, scope: SnapshotScope
    ) -> SessionSnapshot | None:
        turn_id, interrupt_id, call_id = scope.turn_id, scope.interrupt_id, scope.call_id
        message_id, client_message_id = scope.message_id, scope.client_message_id

        async def rows(sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
            async with db.execute(sql, params) as cur:
                return list(await cur.fetchall())

        found = await rows(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        if not found:
            return None
        session = session_row(found[0])
        if interrupt_id is not None:
            owner_turn = await rows(
                "SELECT turn_id FROM interrupts WHERE id = ? AND session_id = ?", (interrupt_id, session_id)
            )
            turn_id = owner_turn[0][0] if owner_turn else None
        elif call_id is not None:
            owner_turn = await rows(
                "SELECT turn_id FROM tool_calls WHERE id = ? AND session_id = ?", (call_id, session_id)
            )
            turn_id = owner_turn[0][0] if owner_turn else None
        else:
            turn_id = turn_id or session.current_turn_id
        if not scope.turn:
            turn_id = None
        queued = (
            await rows(
                f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND status = 'queued' "
                "ORDER BY seq",
                (session_id,),
            )
            if scope.queue
            else []
        )
        probes: dict[str, Any] = {}
        if message_id is not None:
            found = await rows(
                f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE id = ? AND session_id = ?",
                (message_id, session_id),
            )
            probes["message"] = queued_row(found[0]) if found else None
        if client_message_id is not None:
            found = await rows(
                f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND client_message_id = ?",
                (session_id, client_message_id),
            )
            probes["sent"] = queued_row(found[0]) if found else None
        if turn_id is None:
            return SessionSnapshot(
                session=session, turn=None, queued=tuple(queued_row(r) for r in queued), **probes
            )
        turn = await rows(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ? AND session_id = ?", (turn_id, session_id)
        )
        calls = (
            await rows(
                f"SELECT {CALL_COLUMNS} FROM tool_calls WHERE turn_id = ? ORDER BY step_no, call_index",
                (turn_id,),
            )
            if scope.calls
            else []
        )
        interrupts = (
            await rows(
                f"SELECT {INTERRUPT_COLUMNS} FROM interrupts WHERE turn_id = ? ORDER BY created_at, id",
                (turn_id,),
            )
            if scope.interrupts
            else []
        )
        return SessionSnapshot(
            session=session,
            turn=turn_row(turn[0]) if turn else None,
            calls=tuple(call_row(r) for r in calls),
            interrupts=tuple(interrupt_row(r) for r in interrupts),
            queued=tuple(queued_row(r) for r in queued),
            **probes,
        )
