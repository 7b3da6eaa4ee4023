"""The step port on SQLite: a session's snapshot loaded, the decision made and its changes
written in one `BEGIN IMMEDIATE` transaction, in one hand-off to the connection's thread (see
parley/storage/changes.py). Plain row mapping: no rule."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from parley.errors import LeaseLost, StorageError
from parley.ids import SessionId
from parley.storage.base import (
    AttachmentBlob,
    InterruptRecord,
    QueuedMessageRecord,
    ToolCallRecord,
    TurnRecord,
)
from parley.storage.changes import Changes, NewEvent, NewMessage, SessionSnapshot, SnapshotScope
from parley.storage.sqlite_access import insert_audit
from parley.storage.sqlite_plumbing import Connection, dumps
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

T = TypeVar("T")


def _columns(listing: str) -> frozenset[str]:
    return frozenset(c.strip() for c in listing.split(","))


# Per table: the columns a change may write, and those stored as JSON.
_TABLES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "sessions": (_columns(SESSION_COLUMNS), frozenset({"todos", "result", "inputs", "settings", "tags"})),
    "turns": (_columns(TURN_COLUMNS), frozenset({"result", "settings"})),
    "tool_calls": (_columns(CALL_COLUMNS), frozenset({"arguments", "result", "remote"})),
    "interrupts": (_columns(INTERRUPT_COLUMNS), frozenset({"payload", "resolution"})),
    "queued_messages": (_columns(QUEUED_COLUMNS), frozenset({"settings", "attachments", "trace_context"})),
}
# Tables whose rows carry the time of their last change.
_STAMPED = frozenset({"sessions", "tool_calls"})

_INSERT_QUEUED = (
    "INSERT INTO queued_messages (id, session_id, seq, text, status, turn_id, created_at, "
    "client_message_id, steer, settings, attachments, trace_context) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_CALL = (
    "INSERT INTO tool_calls (id, session_id, turn_id, step_no, call_index, name, arguments, status, effect, "
    "idempotency_key, created_at, updated_at, source, server, tool, requires_approval) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_INTERRUPT = (
    "INSERT INTO interrupts (id, session_id, turn_id, tool_call_id, kind, status, payload, created_at, "
    "deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _assignments(table: str, fields: dict[str, Any], now: float) -> dict[str, Any]:
    """The column values of a change to a row of `table` (JSON columns encoded, time stamped)."""
    allowed, as_json = _TABLES[table]
    unknown = set(fields) - allowed
    if unknown:
        raise StorageError(f"{table} has no column(s) {', '.join(sorted(unknown))}")
    values = {k: (dumps(v) if k in as_json and v is not None else v) for k, v in fields.items()}
    if table in _STAMPED:
        values.setdefault("updated_at", now)
    return values


def _update(db: Connection, table: str, row_id: str, fields: dict[str, Any], now: float) -> None:
    values = _assignments(table, fields, now)
    assignments = ", ".join(f"{column} = ?" for column in values)
    db.execute(f"UPDATE {table} SET {assignments} WHERE id = ?", (*values.values(), row_id))


def number_session_rows(
    db: Connection,
    session_id: SessionId,
    *,
    messages: int = 0,
    events: int = 0,
    queued: int = 0,
    fields: dict[str, Any] | None = None,
    now: float = 0.0,
) -> tuple[int, int, int]:
    """Reserve the next numbers of the session's transcript, events and queue, and write the
    session's changed `fields`, in one statement: the first number of each (0 when none)."""
    values = _assignments("sessions", fields, now) if fields else {}
    assignments = [f"{column} = ?" for column in values]
    assignments += [
        "message_seq = message_seq + ?",
        "event_seq = event_seq + ?",
        "queue_seq = queue_seq + ?",
    ]
    row = db.execute(
        f"UPDATE sessions SET {', '.join(assignments)} WHERE id = ? "
        "RETURNING message_seq, event_seq, queue_seq",
        (*values.values(), messages, events, queued, session_id),
    ).fetchone()
    if row is None:
        raise StorageError(f"session {session_id} vanished from the database")
    return int(row[0]) - messages + 1, int(row[1]) - events + 1, int(row[2]) - queued + 1


def append_rows(
    db: Connection,
    session_id: SessionId,
    *,
    messages: Sequence[NewMessage] = (),
    events: Sequence[NewEvent] = (),
    queued: Sequence[QueuedMessageRecord] = (),
    session_fields: dict[str, Any] | None = None,
    now: float,
) -> None:
    """Append transcript messages, events and queued messages, each numbered in the session's own
    sequence, and write the session's changed fields: one UPDATE, then one INSERT per table."""
    if not (messages or events or queued or session_fields):
        return
    first_message, first_event, first_queued = number_session_rows(
        db,
        session_id,
        messages=len(messages),
        events=len(events),
        queued=len(queued),
        fields=session_fields,
        now=now,
    )
    if messages:
        db.executemany(
            "INSERT INTO messages (session_id, seq, turn_id, role, content, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (session_id, first_message + i, m.turn_id, m.role, dumps(m.content), now)
                for i, m in enumerate(messages)
            ],
        )
    if events:
        db.executemany(
            "INSERT INTO events (session_id, seq, turn_id, kind, data, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (session_id, first_event + i, e.turn_id, e.kind, dumps(e.data), now)
                for i, e in enumerate(events)
            ],
        )
    if queued:
        db.executemany(
            _INSERT_QUEUED,
            [
                (
                    q.id,
                    session_id,
                    first_queued + i,
                    q.text,
                    q.status,
                    q.turn_id,
                    q.created_at,
                    q.client_message_id,
                    int(q.steer),
                    dumps(q.settings) if q.settings is not None else None,
                    dumps(q.attachments) if q.attachments is not None else None,
                    dumps(q.trace_context) if q.trace_context is not None else None,
                )
                for i, q in enumerate(queued)
            ],
        )
        store_blobs(db, session_id, [b for q in queued for b in q.blobs], now)


def store_blobs(db: Connection, session_id: SessionId, blobs: Sequence[AttachmentBlob], now: float) -> None:
    """Attachment bytes, each stored once by its hash, and the session's reference to them."""
    if not blobs:
        return
    db.executemany(
        # A blob stored again is marked so: collect_attachments spares what was stored lately.
        "INSERT INTO attachments (sha256, mime_type, size, data, stored_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (sha256) DO UPDATE SET stored_at = excluded.stored_at",
        [(b.sha256, b.mime_type, b.size, b.data, now) for b in blobs],
    )
    db.executemany(
        "INSERT OR IGNORE INTO attachment_refs (session_id, sha256, created_at) VALUES (?, ?, ?)",
        [(session_id, b.sha256, now) for b in blobs],
    )


def _apply(db: Connection, snapshot: SessionSnapshot, changes: Changes, now: float) -> None:
    session_id = snapshot.session.id
    if changes.new_step is not None:
        step = changes.new_step
        try:
            db.execute(
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
    if changes.new_agent_version is not None:
        version = changes.new_agent_version
        db.execute(
            "INSERT INTO agent_versions (agent, version, definition, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (agent, version) DO NOTHING",
            (version.agent, version.version, dumps(version.definition), version.created_at),
        )
    if changes.new_turn is not None:
        _insert_turn(db, changes.new_turn)
    if changes.new_calls:
        db.executemany(_INSERT_CALL, [_call_values(c) for c in changes.new_calls])
    if changes.new_interrupts:
        db.executemany(_INSERT_INTERRUPT, [_interrupt_values(i) for i in changes.new_interrupts])
    if changes.turn:
        if snapshot.turn is None:
            raise StorageError(f"a change to the turn of session {session_id}, which has none loaded")
        _update(db, "turns", snapshot.turn.id, changes.turn, now)
    for call_id, fields in changes.calls.items():
        _update(db, "tool_calls", call_id, fields, now)
    for interrupt_id, fields in changes.interrupts.items():
        _update(db, "interrupts", interrupt_id, fields, now)
    for queued_id, fields in changes.queued.items():
        _update(db, "queued_messages", queued_id, fields, now)
    append_rows(
        db,
        session_id,
        messages=changes.messages,
        events=changes.events,
        queued=changes.new_queued,
        session_fields=changes.session,
        now=now,
    )
    if changes.audit:
        insert_audit(db, changes.audit)


def _insert_turn(db: Connection, turn: TurnRecord) -> None:
    db.execute(
        "INSERT INTO turns (id, session_id, seq, status, queued_message_id, started_at, ended_at, "
        "settings, agent_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            turn.id,
            turn.session_id,
            turn.seq,
            turn.status,
            turn.queued_message_id,
            turn.started_at,
            turn.ended_at,
            dumps(turn.settings),
            turn.agent_version,
        ),
    )


def _call_values(call: ToolCallRecord) -> tuple[Any, ...]:
    return (
        call.id,
        call.session_id,
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
    )


def _interrupt_values(interrupt: InterruptRecord) -> tuple[Any, ...]:
    return (
        interrupt.id,
        interrupt.session_id,
        interrupt.turn_id,
        interrupt.tool_call_id,
        interrupt.kind,
        interrupt.status,
        dumps(interrupt.payload),
        interrupt.created_at,
        interrupt.deadline,
    )


def load_snapshot(db: Connection, session_id: SessionId, scope: SnapshotScope) -> SessionSnapshot | None:
    """The session as `scope` asks for it (see SnapshotScope), or None if there is none."""
    found = db.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if found is None:
        return None
    session = session_row(found)
    turn_id: str | None
    if scope.interrupt_id is not None:
        owner = db.execute(
            "SELECT turn_id FROM interrupts WHERE id = ? AND session_id = ?", (scope.interrupt_id, session_id)
        ).fetchone()
        turn_id = owner[0] if owner else None
    elif scope.call_id is not None:
        owner = db.execute(
            "SELECT turn_id FROM tool_calls WHERE id = ? AND session_id = ?", (scope.call_id, session_id)
        ).fetchone()
        turn_id = owner[0] if owner else None
    else:
        turn_id = scope.turn_id or session.current_turn_id
    if not scope.turn:
        turn_id = None
    queued = (
        db.execute(
            f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND status = 'queued' ORDER BY seq",
            (session_id,),
        ).fetchall()
        if scope.queue
        else []
    )
    probes: dict[str, Any] = {}
    if scope.message_id is not None:
        row = db.execute(
            f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE id = ? AND session_id = ?",
            (scope.message_id, session_id),
        ).fetchone()
        probes["message"] = queued_row(row) if row else None
    if scope.client_message_id is not None:
        row = db.execute(
            f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND client_message_id = ?",
            (session_id, scope.client_message_id),
        ).fetchone()
        probes["sent"] = queued_row(row) if row else None
    if turn_id is None:
        return SessionSnapshot(
            session=session, turn=None, queued=tuple(queued_row(r) for r in queued), **probes
        )
    turn = db.execute(
        f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ? AND session_id = ?", (turn_id, session_id)
    ).fetchone()
    calls = (
        db.execute(
            f"SELECT {CALL_COLUMNS} FROM tool_calls WHERE turn_id = ? ORDER BY step_no, call_index",
            (turn_id,),
        ).fetchall()
        if scope.calls
        else []
    )
    interrupts = (
        db.execute(
            f"SELECT {INTERRUPT_COLUMNS} FROM interrupts WHERE turn_id = ? ORDER BY created_at, id",
            (turn_id,),
        ).fetchall()
        if scope.interrupts
        else []
    )
    return SessionSnapshot(
        session=session,
        turn=turn_row(turn) if turn else None,
        calls=tuple(call_row(r) for r in calls),
        interrupts=tuple(interrupt_row(r) for r in interrupts),
        queued=tuple(queued_row(r) for r in queued),
        **probes,
    )


class SqliteSteps(SqliteTasks):
    """`decide` and `snapshot` of the step port, for the SQLite store."""

    async def snapshot(self, session_id: SessionId, scope: SnapshotScope) -> SessionSnapshot | None:
        return await self._read(lambda db: load_snapshot(db, session_id, scope))

    async def decide(
        self,
        session_id: SessionId,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
        now: float,
        *,
        lease: str | None = None,
    ) -> T:
        def run() -> tuple[T, bool]:
            durable = False

            def transaction(db: Connection) -> T:
                nonlocal durable
                snapshot = load_snapshot(db, session_id, scope)
                if snapshot is not None and lease is not None and snapshot.session.lease_owner != lease:
                    raise LeaseLost(session_id)
                result, changes = decide(snapshot)
                if snapshot is not None and not changes.is_empty():
                    _apply(db, snapshot, changes, now)
                    durable = changes.durable
                return result

            return self._writing(transaction), durable

        result, durable = await self._run(run)
        if durable:
            await self._sync()
        return result
