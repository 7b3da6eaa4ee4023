"""The step port, written once: a session's snapshot read under its lock, the decision made, and
its `Changes` written in the same transaction (see parley/core/changes.py).

Two batches: the session row (locked on PostgreSQL; SQLite's `BEGIN IMMEDIATE` holds the whole
database) with the rest of the snapshot, then every write. The session's sequence numbers
(transcript, events, queue) are read with the locked row, counted here and written back with the
session's own changes in one UPDATE. Plain row mapping: no rule. See
docs/design.md#a-decision-in-sql.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from parley.core.changes import Changes, SessionSnapshot, SnapshotScope
from parley.core.ids import SessionId
from parley.core.records import AuditRecord, QueuedMessageRecord
from parley.errors import LeaseLost, StorageError
from parley.storage.sql.conditions import QUEUED, RUNS_TURN
from parley.storage.sql.program import Announce, Batch, Program, Result, Stmt
from parley.storage.sql.rows import (
    CALL_COLUMNS,
    FIELDS,
    INTERRUPT_COLUMNS,
    QUEUED_COLUMNS,
    SESSION_COLUMNS,
    TURN_COLUMNS,
    WRITABLE,
    Codec,
    columns,
    listing,
)
from parley.storage.sql.usage import admission_writes, load_usage, usage_reads
from parley.storage.wakeups import wake_after

T = TypeVar("T")
# The webhook deliveries a decision's events make (parley/storage/sql/webhooks.py).
Outbox = Callable[[SessionSnapshot, Changes], list[Stmt]]


# The columns a new record is inserted with (the others start from their defaults).
_NEW_TURN = columns(
    "id, session_id, seq, status, queued_message_id, started_at, ended_at, settings, agent_version, mode"
)
_NEW_CALL = columns(
    "id, session_id, turn_id, step_no, call_index, name, arguments, status, effect, idempotency_key, "
    "created_at, updated_at, source, server, tool, requires_approval, result"
)
_NEW_INTERRUPT = columns("id, session_id, turn_id, tool_call_id, kind, status, payload, created_at, deadline")
# Tables whose rows carry the time of their last change.
_STAMPED = frozenset({"sessions", "tool_calls"})


def insert_sql(table: str, columns: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


INSERT_QUEUED = insert_sql("queued_messages", FIELDS["queued_messages"])
# Attachment bytes are stored once by hash; stored again, they are marked so (collect_attachments
# spares what was stored lately). A session refers to the bytes its messages carry.
INSERT_BLOB = (
    "INSERT INTO attachments (sha256, mime_type, size, data, stored_at) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (sha256) DO UPDATE SET stored_at = excluded.stored_at"
)
INSERT_BLOB_REF = (
    "INSERT INTO attachment_refs (session_id, sha256, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
)
INSERT_MESSAGE = insert_sql("messages", FIELDS["messages"])
INSERT_EVENT = insert_sql("events", FIELDS["events"])
INSERT_AUDIT = insert_sql("audit", FIELDS["audit"][1:])  # the id is the database's
_INSERT_STEP = insert_sql(
    "steps",
    columns(
        "session_id, turn_id, step_no, kind, process_id, input_tokens, output_tokens, created_at, cached_tokens"
    ),
)


def audit_params(codec: Codec, entry: AuditRecord) -> list[Any]:
    return codec.record_params("audit", entry)[1:]


def queued_params(codec: Codec, message: QueuedMessageRecord, session_id: SessionId, seq: int) -> list[Any]:
    """The parameters of INSERT_QUEUED for a message of `session_id` numbered `seq`."""
    return codec.record_params("queued_messages", message, session_id=session_id, seq=seq)


def blob_statements(queued: list[QueuedMessageRecord], session_id: SessionId, now: float) -> list[Stmt]:
    blobs = [b for message in queued for b in message.blobs]
    if not blobs:
        return []
    return [
        Stmt(INSERT_BLOB, many=[(b.sha256, b.mime_type, b.size, b.data, now) for b in blobs]),
        Stmt(INSERT_BLOB_REF, many=[(session_id, b.sha256, now) for b in blobs]),
    ]


# ---------------------------------------------------------------------- the snapshot


def snapshot_reads(codec: Codec, session_id: SessionId, scope: SnapshotScope, *, lock: bool) -> list[Stmt]:
    """The statements that load a snapshot of `scope`, in the order load_snapshot reads them:
    the session (with its sequence numbers; with `lock`, locked until the transaction ends), the
    queue, the message asked for by id, the one sent with a client_message_id, then the turn,
    its calls and its interrupts, and the transcript from `messages_from`. The turn is found in
    SQL from the session row (or the interrupt or call named), so the whole snapshot is one batch."""
    dialect = codec.dialect
    sid = session_id
    reads = [
        Stmt(
            f"SELECT {SESSION_COLUMNS}, message_seq, event_seq, queue_seq FROM sessions WHERE id = ?"
            + (dialect.for_update if lock else ""),
            (sid,),
        ),
    ]
    if scope.queue:
        reads.append(
            Stmt(
                f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND {QUEUED} ORDER BY seq",
                (sid,),
            )
        )
    if scope.message_id is not None:
        reads.append(
            Stmt(
                f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE id = ? AND session_id = ?",
                (scope.message_id, sid),
            )
        )
    if scope.client_message_id is not None:
        reads.append(
            Stmt(
                f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND client_message_id = ?",
                (sid, scope.client_message_id),
            )
        )
    if scope.turn:
        reads.extend(_turn_reads(scope, sid, *_turn_of(scope, sid)))
    if scope.messages_from is not None:
        reads.append(
            Stmt(
                f"SELECT {listing('messages')} FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (sid, scope.messages_from),
            )
        )
    if scope.usage is not None:
        # After the session's lock: every decision that takes both takes them in this order.
        reads.extend(usage_reads(dialect, scope.usage, lock=lock))
    return reads


def _turn_of(scope: SnapshotScope, sid: SessionId) -> tuple[str, tuple[Any, ...]]:
    """SQL that selects the id of the scope's turn, and its parameters."""
    if scope.interrupt_id is not None:
        return "SELECT turn_id FROM interrupts WHERE id = ? AND session_id = ?", (scope.interrupt_id, sid)
    if scope.call_id is not None:
        return "SELECT turn_id FROM tool_calls WHERE id = ? AND session_id = ?", (scope.call_id, sid)
    if scope.turn_id:
        return "?", (scope.turn_id,)
    return "SELECT current_turn_id FROM sessions WHERE id = ?", (sid,)


def _turn_reads(scope: SnapshotScope, sid: SessionId, turn: str, turn_params: tuple[Any, ...]) -> list[Stmt]:
    """The turn (`turn`: SQL that selects its id), its calls and its interrupts, as `scope` asks;
    with `settled`, only once the session runs that turn no more."""
    settled = ""
    settled_params: tuple[Any, ...] = ()
    if scope.settled and scope.turn_id:
        settled, settled_params = f" AND NOT EXISTS ({RUNS_TURN})", (sid, scope.turn_id)
    reads = [
        Stmt(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ({turn}) AND session_id = ?{settled}",
            (*turn_params, sid, *settled_params),
        )
    ]
    if scope.calls:
        reads.append(
            Stmt(
                f"SELECT {CALL_COLUMNS} FROM tool_calls WHERE turn_id = ({turn}){settled} "
                "ORDER BY step_no, call_index",
                (*turn_params, *settled_params),
            )
        )
    if scope.interrupts:
        reads.append(
            Stmt(
                f"SELECT {INTERRUPT_COLUMNS} FROM interrupts WHERE turn_id = ({turn}){settled} "
                "ORDER BY created_at, id",
                (*turn_params, *settled_params),
            )
        )
    return reads


@dataclass(slots=True)
class Counters:
    """The session's last sequence numbers, as the locked row holds them plus what this
    transaction has given out."""

    message: int
    event: int
    queue: int


def load_snapshot(
    codec: Codec, scope: SnapshotScope, results: list[Result], *, lock: bool = True
) -> tuple[SessionSnapshot, Counters] | None:
    """The snapshot the statements of snapshot_reads read, or None when there is no session."""
    found = iter(results)
    session_rows = next(found).rows
    if not session_rows:
        return None
    width = len(FIELDS["sessions"])
    message_seq, event_seq, queue_seq = session_rows[0][width:]
    queued = next(found).rows if scope.queue else []
    message = next(found).rows if scope.message_id is not None else []
    sent = next(found).rows if scope.client_message_id is not None else []
    turn = next(found).rows if scope.turn else []
    calls = next(found).rows if scope.turn and scope.calls else []
    interrupts = next(found).rows if scope.turn and scope.interrupts else []
    messages = next(found).rows if scope.messages_from is not None else []
    usage = load_usage(codec.dialect, scope.usage, found, lock=lock) if scope.usage is not None else None
    snapshot = SessionSnapshot(
        session=codec.session(session_rows[0][:width]),
        turn=codec.turn(turn[0]) if turn else None,
        calls=tuple(codec.call(r) for r in calls) if turn else (),
        interrupts=tuple(codec.interrupt(r) for r in interrupts) if turn else (),
        queued=tuple(codec.queued(r) for r in queued),
        message=codec.queued(message[0]) if message else None,
        sent=codec.queued(sent[0]) if sent else None,
        usage=usage,
        messages=tuple(codec.record("messages", r) for r in messages),
    )
    return snapshot, Counters(message=int(message_seq), event=int(event_seq), queue=int(queue_seq))


# ---------------------------------------------------------------------- the writes


def _check_columns(table: str, fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - WRITABLE[table]
    if unknown:
        raise StorageError(f"{table} has no column(s) {', '.join(sorted(unknown))}")


def _check(snapshot: SessionSnapshot, changes: Changes) -> None:
    """Everything is checked before anything is written, so a refused change writes nothing."""
    _check_columns("sessions", changes.session)
    _check_columns("turns", changes.turn)
    for table, patches in (
        ("tool_calls", changes.calls),
        ("interrupts", changes.interrupts),
        ("queued_messages", changes.queued),
    ):
        for fields in patches.values():
            _check_columns(table, fields)
    if changes.turn and snapshot.turn is None:
        raise StorageError(f"a change to the turn of session {snapshot.session.id}, which has none loaded")


# A session's reference to bytes no other message of it names (sha256 is hex: LIKE finds it in
# the JSON as it is written).
_RELEASE_BLOB_REF = (
    "DELETE FROM attachment_refs WHERE session_id = ? AND sha256 = ? "
    "AND NOT EXISTS (SELECT 1 FROM queued_messages q WHERE q.session_id = attachment_refs.session_id "
    "AND q.status <> 'dropped' AND CAST(q.attachments AS TEXT) LIKE ?) "
    "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = attachment_refs.session_id "
    "AND CAST(m.content AS TEXT) LIKE ?)"
)


class ChangeWriter:
    """The statements that write one decision's `Changes` to the snapshot it was made on."""

    def __init__(self, codec: Codec, snapshot: SessionSnapshot, counters: Counters, now: float) -> None:
        self._codec = codec
        self._snapshot = snapshot
        self._counters = counters
        self._now = now
        self.statements: list[Stmt] = []

    def write(self, changes: Changes) -> list[Stmt]:
        _check(self._snapshot, changes)
        self._new_records(changes)
        snapshot = self._snapshot
        if changes.turn:
            assert snapshot.turn is not None
            self._update("turns", snapshot.turn.id, changes.turn)
        for table, patches in (
            ("tool_calls", changes.calls),
            ("interrupts", changes.interrupts),
            ("queued_messages", changes.queued),
        ):
            for row_id, fields in patches.items():
                self._update(table, row_id, fields)
        self._release_dropped_attachments(changes)
        self._appended(changes)
        if changes.audit:
            self._many(INSERT_AUDIT, [audit_params(self._codec, e) for e in changes.audit])
        self.statements.extend(admission_writes(changes.admitted, self._now))
        return self.statements

    def _release_dropped_attachments(self, changes: Changes) -> None:
        """A dropped message's attachments that nothing else of the session carries (another
        message, queued or sent, or the transcript) lose their reference: they are no longer the
        session's, and the collector frees bytes no session refers to."""
        snapshot = self._snapshot
        messages = {m.id: m for m in (*snapshot.queued, *([snapshot.message] if snapshot.message else []))}
        rows = []
        for message_id, fields in changes.queued.items():
            message = messages.get(message_id)
            if fields.get("status") != "dropped" or message is None:
                continue
            for ref in message.attachments or []:
                sha256 = ref.get("sha256")
                if isinstance(sha256, str) and sha256.isalnum():
                    rows.append((snapshot.session.id, sha256, f"%{sha256}%", f"%{sha256}%"))
        self._many(_RELEASE_BLOB_REF, rows)

    def _many(self, sql: str, rows: list[Any]) -> None:
        if rows:
            self.statements.append(Stmt(sql, many=rows))

    def _new_records(self, changes: Changes) -> None:
        codec, session_id, now = self._codec, self._snapshot.session.id, self._now
        if changes.new_step is not None:
            step = changes.new_step
            self.statements.append(
                Stmt(
                    _INSERT_STEP,
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
            )
        if changes.new_agent_version is not None:
            version = changes.new_agent_version
            self.statements.append(
                Stmt(
                    "INSERT INTO agent_versions (agent, version, definition, created_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (agent, version) DO NOTHING",
                    (
                        version.agent,
                        version.version,
                        codec.dialect.json(version.definition),
                        version.created_at,
                    ),
                )
            )
        if changes.new_turn is not None:
            turn = changes.new_turn
            self.statements.append(
                Stmt(
                    insert_sql("turns", _NEW_TURN),
                    [
                        codec.param("turns", c, session_id if c == "session_id" else getattr(turn, c))
                        for c in _NEW_TURN
                    ],
                )
            )
        queued_rows = []
        for new in changes.new_queued:
            self._counters.queue += 1
            queued_rows.append(queued_params(codec, new, session_id, self._counters.queue))
        self._many(INSERT_QUEUED, queued_rows)
        self.statements.extend(blob_statements(changes.new_queued, session_id, now))
        for table, names, records in (
            ("tool_calls", _NEW_CALL, changes.new_calls),
            ("interrupts", _NEW_INTERRUPT, changes.new_interrupts),
        ):
            self._many(
                insert_sql(table, names),
                [
                    [codec.param(table, c, session_id if c == "session_id" else getattr(r, c)) for c in names]
                    for r in records
                ],
            )

    def _appended(self, changes: Changes) -> None:
        """The transcript and events, numbered in the session's sequences, then the session row:
        its own changes and the numbers given out."""
        codec, counters, session_id, now = self._codec, self._counters, self._snapshot.session.id, self._now
        before = (counters.message, counters.event, counters.queue)
        message_rows = []
        for message in changes.messages:
            counters.message += 1
            content = codec.dialect.json(message.content)
            message_rows.append((session_id, counters.message, message.turn_id, message.role, content, now))
        self._many(INSERT_MESSAGE, message_rows)
        event_rows = []
        for event in changes.events:
            counters.event += 1
            data = codec.dialect.json(event.data)
            event_rows.append((session_id, counters.event, event.turn_id, event.kind, data, now))
        self._many(INSERT_EVENT, event_rows)
        fields: dict[str, Any] = dict(changes.session)
        if fields:
            fields.setdefault("updated_at", now)
        values = codec.params("sessions", fields)
        if (counters.message, counters.event, counters.queue) != before:
            values |= {
                "message_seq": counters.message,
                "event_seq": counters.event,
                "queue_seq": counters.queue,
            }
        if values:
            self._set("sessions", session_id, values)

    def _update(self, table: str, row_id: str, fields: Mapping[str, Any]) -> None:
        values = dict(fields)
        if table in _STAMPED:
            values.setdefault("updated_at", self._now)
        self._set(table, row_id, self._codec.params(table, values))

    def _set(self, table: str, row_id: str, values: dict[str, Any]) -> None:
        assignments = ", ".join(f"{column} = ?" for column in values)
        self.statements.append(
            Stmt(f"UPDATE {table} SET {assignments} WHERE id = ?", (*values.values(), row_id))
        )


def decide_program(
    codec: Codec,
    session_id: SessionId,
    scope: SnapshotScope,
    decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
    now: float,
    lease: str | None,
    outbox: Outbox | None = None,
    after: SnapshotScope | None = None,
) -> Program[tuple[T, SessionSnapshot | None]]:
    """The decision's value, and with `after` the snapshot of that scope as the decision left it,
    read in the same transaction (after the writes, in their batch: no round trip more)."""
    results = yield Batch(snapshot_reads(codec, session_id, scope, lock=True), writes=False)
    loaded = load_snapshot(codec, scope, results)
    if loaded is None:
        return decide(None)[0], None
    snapshot, counters = loaded
    # The fencing check: under the lock, so no other holding can come between it and the commit.
    if lease is not None and snapshot.session.lease_owner != lease:
        raise LeaseLost(session_id)
    value, changes = decide(snapshot)
    if changes.is_empty():
        if after is None:
            return value, None
        results = yield Batch(snapshot_reads(codec, session_id, after, lock=False), last=True, writes=False)
        return value, looked(codec, after, results)
    seen = yield from written(codec, (snapshot, counters), changes, now, outbox, after)
    return value, seen


def written(
    codec: Codec,
    loaded: tuple[SessionSnapshot, Counters],
    changes: Changes,
    now: float,
    outbox: Outbox | None,
    after: SnapshotScope | None,
) -> Program[SessionSnapshot | None]:
    """The last batch of a decision: the writes of `changes` (not empty) made on the snapshot
    read under the session's lock, committed; with `after`, that scope read back after them."""
    snapshot, counters = loaded
    session_id = snapshot.session.id
    statements = ChangeWriter(codec, snapshot, counters, now).write(changes)
    if outbox is not None:
        # The webhook deliveries of its events: committed with them, or not at all.
        statements += outbox(snapshot, changes)
    count = len(statements)
    looks = snapshot_reads(codec, session_id, after, lock=False) if after is not None else []
    # Other processes hear of it (a NOTIFY delivered at COMMIT on PostgreSQL).
    announce = (Announce(wake_after(snapshot.session, changes, now)),)
    results = yield Batch(
        statements + looks, last=True, announce=announce, durable=changes.durable, step_of=session_id
    )
    return looked(codec, after, results[count:]) if after is not None else None


def looked(codec: Codec, scope: SnapshotScope, results: list[Result]) -> SessionSnapshot | None:
    """The snapshot the statements of snapshot_reads (without a lock) read, or None."""
    loaded = load_snapshot(codec, scope, results, lock=False)
    return loaded[0] if loaded is not None else None


def snapshot_program(
    codec: Codec, session_id: SessionId, scope: SnapshotScope
) -> Program[SessionSnapshot | None]:
    results = yield Batch(snapshot_reads(codec, session_id, scope, lock=False), last=True, writes=False)
    return looked(codec, scope, results)
