"""The step port on PostgreSQL: a session's snapshot loaded under `SELECT ... FOR UPDATE` on its
row and its changes written in the same transaction (see parley/storage/changes.py).

Two round trips per decision: BEGIN, the locked session row and the rest of the snapshot in one
(the other reads run after the lock is granted, so they see what the lock protects); then every
write and the COMMIT in the other. The session's sequence numbers (transcript, events, queue) are
counted here from the locked row and written back with one UPDATE. Plain row mapping: no rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from parley.errors import LeaseLost, StorageError
from parley.ids import SessionId
from parley.storage.base import QueuedMessageRecord
from parley.storage.changes import Changes, SessionSnapshot, SnapshotScope
from parley.storage.postgres_access import INSERT_AUDIT, audit_values
from parley.storage.postgres_plumbing import Params, Row, Statement, Writes
from parley.storage.postgres_rows import (
    CALL_FIELDS,
    INTERRUPT_FIELDS,
    QUEUED_FIELDS,
    SESSION_FIELDS,
    TURN_FIELDS,
    WRITABLE,
    call_row,
    change_values,
    column_value,
    interrupt_row,
    json_value,
    listing,
    queued_row,
    session_row,
    turn_row,
)
from parley.storage.postgres_tasks import PostgresTasks
from parley.storage.wakeups import wake_after

T = TypeVar("T")

_SESSION = listing(SESSION_FIELDS)
_TURN = listing(TURN_FIELDS)
_QUEUED = listing(QUEUED_FIELDS)
_CALL = listing(CALL_FIELDS)
_INTERRUPT = listing(INTERRUPT_FIELDS)

# The columns a new record is inserted with (the others start from their defaults, as on SQLite).
NEW_TURN = (
    "id",
    "session_id",
    "seq",
    "status",
    "queued_message_id",
    "started_at",
    "ended_at",
    "settings",
    "agent_version",
)
NEW_CALL = [
    "id",
    "session_id",
    "turn_id",
    "step_no",
    "call_index",
    "name",
    "arguments",
    "status",
    "effect",
    "idempotency_key",
    "created_at",
    "updated_at",
    "source",
    "server",
    "tool",
    "requires_approval",
]
NEW_INTERRUPT = [
    "id",
    "session_id",
    "turn_id",
    "tool_call_id",
    "kind",
    "status",
    "payload",
    "created_at",
    "deadline",
]
# Tables whose rows carry the time of their last change.
_STAMPED = frozenset({"sessions", "tool_calls"})

INSERT_QUEUED = f"INSERT INTO queued_messages ({_QUEUED}) VALUES ({', '.join(['%s'] * len(QUEUED_FIELDS))})"
# Attachment bytes are stored once by hash (stored again: marked so, which collect_attachments
# spares); a session refers to them (see migration 4).
INSERT_BLOB = (
    "INSERT INTO attachments (sha256, mime_type, size, data, stored_at) VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT (sha256) DO UPDATE SET stored_at = excluded.stored_at"
)
INSERT_BLOB_REF = (
    "INSERT INTO attachment_refs (session_id, sha256, created_at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
)
INSERT_MESSAGE = "INSERT INTO messages (session_id, seq, turn_id, role, content, created_at) VALUES (%s, %s, %s, %s, %s, %s)"
INSERT_EVENT = (
    "INSERT INTO events (session_id, seq, turn_id, kind, data, created_at) VALUES (%s, %s, %s, %s, %s, %s)"
)


def _insert(table: str, columns: list[str] | tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"


def _check_columns(table: str, fields: dict[str, Any]) -> None:
    unknown = set(fields) - WRITABLE[table]
    if unknown:
        raise StorageError(f"{table} has no column(s) {', '.join(sorted(unknown))}")


@dataclass(slots=True)
class _Counters:
    """The session's last sequence numbers, as the locked row holds them plus what this
    transaction has given out."""

    message: int
    event: int
    queue: int


class _Transaction:
    def __init__(self, snapshot: SessionSnapshot, counters: _Counters, writes: Writes) -> None:
        self._snapshot = snapshot
        self._counters = counters
        self._writes = writes

    @property
    def snapshot(self) -> SessionSnapshot:
        return self._snapshot

    def apply(self, changes: Changes, now: float) -> None:
        snapshot = self._snapshot
        session_id = snapshot.session.id
        # Everything is checked before anything is queued, so a refused change queues nothing.
        _check_columns("sessions", changes.session)
        _check_columns("turns", changes.turn)
        for call_fields in changes.calls.values():
            _check_columns("tool_calls", call_fields)
        for interrupt_fields in changes.interrupts.values():
            _check_columns("interrupts", interrupt_fields)
        for queued_fields in changes.queued.values():
            _check_columns("queued_messages", queued_fields)
        if changes.turn and snapshot.turn is None:
            raise StorageError(f"a change to the turn of session {session_id}, which has none loaded")
        writes, counters = self._writes, self._counters
        before = (counters.message, counters.event, counters.queue)

        # In the order SqliteSteps' apply writes, so a constraint fails on the same record.
        if changes.new_step is not None:
            step = changes.new_step
            writes.add(
                "INSERT INTO steps (session_id, turn_id, step_no, kind, process_id, input_tokens, "
                "output_tokens, created_at, cached_tokens) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
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
        if changes.new_agent_version is not None:
            version = changes.new_agent_version
            writes.add(
                "INSERT INTO agent_versions (agent, version, definition, created_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (agent, version) DO NOTHING",
                (version.agent, version.version, json_value(version.definition), version.created_at),
            )
        if changes.new_turn is not None:
            turn = changes.new_turn
            turn_values = [column_value("turns", c, getattr(turn, c)) for c in NEW_TURN]
            turn_values[NEW_TURN.index("session_id")] = session_id
            writes.add(_insert("turns", NEW_TURN), turn_values)
        queued_rows: list[Params] = []
        for new in changes.new_queued:
            counters.queue += 1
            queued_rows.append(queued_values(new, session_id, counters.queue))
        writes.add_many(INSERT_QUEUED, queued_rows)
        blobs = [b for new in changes.new_queued for b in new.blobs]
        writes.add_many(INSERT_BLOB, [(b.sha256, b.mime_type, b.size, b.data, now) for b in blobs])
        writes.add_many(INSERT_BLOB_REF, [(session_id, b.sha256, now) for b in blobs])
        writes.add_many(
            _insert("tool_calls", NEW_CALL),
            [
                [
                    session_id if c == "session_id" else column_value("tool_calls", c, getattr(call, c))
                    for c in NEW_CALL
                ]
                for call in changes.new_calls
            ],
        )
        writes.add_many(
            _insert("interrupts", NEW_INTERRUPT),
            [
                [
                    session_id if c == "session_id" else column_value("interrupts", c, getattr(interrupt, c))
                    for c in NEW_INTERRUPT
                ]
                for interrupt in changes.new_interrupts
            ],
        )
        if changes.turn:
            assert snapshot.turn is not None
            self._update("turns", snapshot.turn.id, changes.turn, now)
        for call_id, call_fields in changes.calls.items():
            self._update("tool_calls", call_id, call_fields, now)
        for interrupt_id, interrupt_fields in changes.interrupts.items():
            self._update("interrupts", interrupt_id, interrupt_fields, now)
        for queued_id, queued_fields in changes.queued.items():
            self._update("queued_messages", queued_id, queued_fields, now)
        message_rows: list[Params] = []
        for message in changes.messages:
            counters.message += 1
            message_rows.append(
                (
                    session_id,
                    counters.message,
                    message.turn_id,
                    message.role,
                    json_value(message.content),
                    now,
                )
            )
        writes.add_many(INSERT_MESSAGE, message_rows)
        event_rows: list[Params] = []
        for event in changes.events:
            counters.event += 1
            event_rows.append(
                (session_id, counters.event, event.turn_id, event.kind, json_value(event.data), now)
            )
        writes.add_many(INSERT_EVENT, event_rows)
        # The session row last: its own changes, and the numbers given out above.
        session_fields = dict(changes.session)
        if session_fields:
            session_fields.setdefault("updated_at", now)
        values = change_values("sessions", session_fields)
        if (counters.message, counters.event, counters.queue) != before:
            values |= {
                "message_seq": counters.message,
                "event_seq": counters.event,
                "queue_seq": counters.queue,
            }
        if values:
            self._add_update("sessions", session_id, values)
        writes.add_many(INSERT_AUDIT, [audit_values(entry) for entry in changes.audit])

    def _update(self, table: str, row_id: str, fields: dict[str, Any], now: float) -> None:
        values = dict(fields)
        if table in _STAMPED:
            values.setdefault("updated_at", now)
        self._add_update(table, row_id, change_values(table, values))

    def _add_update(self, table: str, row_id: str, values: dict[str, Any]) -> None:
        assignments = ", ".join(f"{column} = %s" for column in values)
        self._writes.add(f"UPDATE {table} SET {assignments} WHERE id = %s", (*values.values(), row_id))


def queued_values(message: QueuedMessageRecord, session_id: SessionId, seq: int) -> list[Any]:
    """The parameters of INSERT_QUEUED for a message of `session_id` numbered `seq`."""
    values = [column_value("queued_messages", c, getattr(message, c)) for c in QUEUED_FIELDS]
    values[QUEUED_FIELDS.index("session_id")] = session_id
    values[QUEUED_FIELDS.index("seq")] = seq
    return values


def _snapshot_reads(
    session_id: SessionId, scope: SnapshotScope, *, lock: bool
) -> tuple[list[Statement], list[str]]:
    """The statements that load a snapshot of `scope` (with `lock`, under the session row's lock
    until the transaction ends), and what each one loads."""
    params: dict[str, Any] = {
        "sid": session_id,
        "tid": scope.turn_id,
        "iid": scope.interrupt_id,
        "cid": scope.call_id,
        "mid": scope.message_id,
        "cmid": scope.client_message_id,
    }
    # The turn, found in SQL from the locked session row (or the interrupt or call named), so the
    # whole snapshot loads in one round trip.
    if scope.interrupt_id is not None:
        turn = "SELECT turn_id FROM interrupts WHERE id = %(iid)s AND session_id = %(sid)s"
    elif scope.call_id is not None:
        turn = "SELECT turn_id FROM tool_calls WHERE id = %(cid)s AND session_id = %(sid)s"
    else:
        turn = "SELECT coalesce(nullif(%(tid)s::text, ''), current_turn_id) FROM sessions WHERE id = %(sid)s"
    reads: list[tuple[str, str]] = [
        (
            "session",
            f"SELECT {_SESSION}, message_seq, event_seq, queue_seq FROM sessions WHERE id = %(sid)s"
            + (" FOR UPDATE" if lock else ""),
        )
    ]
    if scope.queue:
        reads.append(
            (
                "queued",
                f"SELECT {_QUEUED} FROM queued_messages WHERE session_id = %(sid)s AND status = 'queued' "
                "ORDER BY seq",
            )
        )
    if scope.message_id is not None:
        reads.append(
            ("message", f"SELECT {_QUEUED} FROM queued_messages WHERE id = %(mid)s AND session_id = %(sid)s")
        )
    if scope.client_message_id is not None:
        reads.append(
            (
                "sent",
                f"SELECT {_QUEUED} FROM queued_messages WHERE session_id = %(sid)s "
                "AND client_message_id = %(cmid)s",
            )
        )
    if scope.turn:
        reads.append(("turn", f"SELECT {_TURN} FROM turns WHERE id = ({turn}) AND session_id = %(sid)s"))
        if scope.calls:
            reads.append(
                (
                    "calls",
                    f"SELECT {_CALL} FROM tool_calls WHERE turn_id = ({turn}) ORDER BY step_no, call_index",
                )
            )
        if scope.interrupts:
            reads.append(
                (
                    "interrupts",
                    f"SELECT {_INTERRUPT} FROM interrupts WHERE turn_id = ({turn}) ORDER BY created_at, id",
                )
            )
    return [(query, params) for _, query in reads], [name for name, _ in reads]


def _snapshot(names: list[str], results: list[list[Row]]) -> tuple[SessionSnapshot, _Counters] | None:
    loaded = dict(zip(names, results, strict=True))
    if not loaded["session"]:
        return None
    session_values = loaded["session"][0]
    fields = len(SESSION_FIELDS)
    message_seq, event_seq, queue_seq = session_values[fields:]
    turn = loaded.get("turn") or []
    message = loaded.get("message") or []
    sent = loaded.get("sent") or []
    snapshot = SessionSnapshot(
        session=session_row(session_values[:fields]),
        turn=turn_row(turn[0]) if turn else None,
        calls=tuple(call_row(r) for r in loaded.get("calls", [])),
        interrupts=tuple(interrupt_row(r) for r in loaded.get("interrupts", [])),
        queued=tuple(queued_row(r) for r in loaded.get("queued", [])),
        message=queued_row(message[0]) if message else None,
        sent=queued_row(sent[0]) if sent else None,
    )
    return snapshot, _Counters(message=message_seq, event=event_seq, queue=queue_seq)


class PostgresSteps(PostgresTasks):
    """`decide` and `snapshot` of the step port, for the PostgreSQL store."""

    async def decide(
        self,
        session_id: SessionId,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
        now: float,
        *,
        lease: str | None = None,
    ) -> T:
        reads, names = _snapshot_reads(session_id, scope, lock=True)
        async with self._transaction(reads, session_id) as (results, writes):
            loaded = _snapshot(names, results)
            if loaded is None:
                return decide(None)[0]
            snapshot, counters = loaded
            # The fencing check: under the row lock, so no other holding can come between it and
            # the commit.
            if lease is not None and snapshot.session.lease_owner != lease:
                raise LeaseLost(session_id)
            result, changes = decide(snapshot)
            if not changes.is_empty():
                _Transaction(snapshot, counters, writes).apply(changes, now)
                # Other replicas hear of it (postgres_feed.py): a `pg_notify` queued after the
                # writes is delivered by PostgreSQL at COMMIT, with no extra round trip.
                self._announce(writes, wake_after(snapshot.session, changes, now))
            return result

    async def snapshot(self, session_id: SessionId, scope: SnapshotScope) -> SessionSnapshot | None:
        reads, names = _snapshot_reads(session_id, scope, lock=False)
        async with self._transaction(reads, session_id) as (results, _):
            loaded = _snapshot(names, results)
        return loaded[0] if loaded is not None else None
