"""The state every handle of an in-memory database shares: the tables, and writes that commit whole.

A write works on a copy of the tables and replaces them when it ends without an error, so a
reader (in this process or "another", i.e. another handle) sees every change of a transaction
or none of it, and never waits. One lock serializes the writers, as SQLite's write lock does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio

from parley.errors import StorageError
from parley.ids import QueuedMessageId, SessionId, ToolCallId, TurnId
from parley.storage.base import (
    AgentVersionRecord,
    AttachmentBlob,
    AuditRecord,
    EventRecord,
    InterruptRecord,
    MessageRecord,
    QueuedMessageRecord,
    Role,
    SessionRecord,
    StepRecord,
    TaskRecord,
    ToolCallRecord,
    TurnRecord,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")
Counter = Literal["message", "event", "queue"]


@dataclass(frozen=True, slots=True)
class _Column:
    """How a record type is stored: its table's name, the fields held as JSON and the flags."""

    table: str
    json: tuple[str, ...]
    flags: tuple[str, ...] = ()


_COLUMNS: dict[type[Any], _Column] = {
    SessionRecord: _Column(
        "sessions", ("todos", "result", "inputs", "settings", "tags"), ("close_requested",)
    ),
    TurnRecord: _Column("turns", ("result", "settings")),
    ToolCallRecord: _Column("tool_calls", ("arguments", "result", "remote"), ("requires_approval",)),
    InterruptRecord: _Column("interrupts", ("payload", "resolution")),
    QueuedMessageRecord: _Column("queued_messages", ("settings", "attachments", "trace_context"), ("steer",)),
    MessageRecord: _Column("messages", ("content",)),
    EventRecord: _Column("events", ("data",)),
    TaskRecord: _Column("tasks", ("result",)),
    StepRecord: _Column("steps", ()),
    AuditRecord: _Column("audit", ("detail",)),
    AgentVersionRecord: _Column("agent_versions", ("definition",)),
}
# Records that carry the time of their last change.
_STAMPED = (SessionRecord, ToolCallRecord)


def _json(value: Any) -> Any:
    # What a JSON column gives back: a fresh copy (tuples become lists, keys strings); a value
    # that is not JSON fails here, as it does on SQLite.
    return json.loads(json.dumps(value, ensure_ascii=False)) if value is not None else None


def row(record: R) -> R:
    """`record` as a table holds it, and as a read hands it out: its JSON values copied (so no
    caller shares a dict with the store) and its flags as bools."""
    column = _COLUMNS[type(record)]
    values = {name: _json(getattr(record, name)) for name in column.json}
    values.update({name: bool(getattr(record, name)) for name in column.flags})
    return replace(record, **values)


def rows(records: Iterable[R]) -> list[R]:
    return [row(r) for r in records]


def updated(record: R, changes: Mapping[str, Any], now: float) -> R:
    """`record` with `changes` (by field name) written, stamped with `now` if it keeps the time."""
    allowed = {f.name for f in fields(record)}
    unknown = set(changes) - allowed
    if unknown:
        raise StorageError(f"{_COLUMNS[type(record)].table} has no column(s) {', '.join(sorted(unknown))}")
    values = dict(changes)
    if isinstance(record, _STAMPED):
        values.setdefault("updated_at", now)
    return row(replace(record, **values))


@dataclass(frozen=True, slots=True)
class Counters:
    """A session's sequence numbers: the last one given to a message, an event, a queued message."""

    message: int = 0
    event: int = 0
    queue: int = 0


@dataclass(frozen=True, slots=True)
class Summary:
    turn_id: TurnId | None
    text: str
    created_at: float


@dataclass(slots=True)
class MemoryTables:
    """The rows, keyed as SQLite's primary keys. Records are frozen and never changed in place;
    a write replaces them (see `MemoryDatabase.write`)."""

    sessions: dict[SessionId, SessionRecord] = field(default_factory=dict)
    counters: dict[SessionId, Counters] = field(default_factory=dict)
    turns: dict[TurnId, TurnRecord] = field(default_factory=dict)
    messages: dict[tuple[SessionId, int], MessageRecord] = field(default_factory=dict)
    events: dict[tuple[SessionId, int], EventRecord] = field(default_factory=dict)
    calls: dict[ToolCallId, ToolCallRecord] = field(default_factory=dict)
    interrupts: dict[str, InterruptRecord] = field(default_factory=dict)
    queued: dict[QueuedMessageId, QueuedMessageRecord] = field(default_factory=dict)
    # (turn, kind, step_no), the key that keeps a step from being committed twice.
    steps: dict[tuple[TurnId, str, int], StepRecord] = field(default_factory=dict)
    summaries: dict[tuple[SessionId, int], Summary] = field(default_factory=dict)
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    # By id, which grows with every entry (an id is never given twice, also after a purge).
    audit: dict[int, AuditRecord] = field(default_factory=dict)
    audit_seq: dict[str, int] = field(default_factory=dict)
    # By (agent, version): shared by every session of the agent, so deleting a session keeps them.
    agent_versions: dict[tuple[str, str], AgentVersionRecord] = field(default_factory=dict)
    # Attachment bytes by sha256, when each was last stored, and which sessions refer to them
    # ((session, sha256) -> since).
    attachments: dict[str, AttachmentBlob] = field(default_factory=dict)
    attachments_stored: dict[str, float] = field(default_factory=dict)
    attachment_refs: dict[tuple[SessionId, str], float] = field(default_factory=dict)

    def copy(self) -> MemoryTables:
        # The records themselves are frozen, so copying the dicts is enough.
        return MemoryTables(**{f.name: dict(getattr(self, f.name)) for f in fields(self)})

    def next_seq(self, session_id: SessionId, counter: Counter) -> int:
        """The session's next number in `counter`: 1 first, and never given out twice."""
        if session_id not in self.sessions:
            raise StorageError(f"session {session_id} vanished from the database")
        counters = self.counters.get(session_id, Counters())
        seq: int = getattr(counters, counter) + 1
        self.counters[session_id] = replace(counters, **{counter: seq})
        return seq

    def append_event(
        self, session_id: SessionId, turn_id: TurnId | None, kind: str, data: dict[str, Any], now: float
    ) -> None:
        seq = self.next_seq(session_id, "event")
        self.events[(session_id, seq)] = row(
            EventRecord(session_id=session_id, seq=seq, turn_id=turn_id, kind=kind, data=data, created_at=now)
        )

    def append_message(
        self, session_id: SessionId, turn_id: TurnId | None, role: Role, content: dict[str, Any], now: float
    ) -> None:
        seq = self.next_seq(session_id, "message")
        self.messages[(session_id, seq)] = row(
            MessageRecord(
                session_id=session_id, seq=seq, turn_id=turn_id, role=role, content=content, created_at=now
            )
        )

    def insert_queued(self, message: QueuedMessageRecord) -> QueuedMessageRecord:
        """Store a queued message under the session's next queue number."""
        if message.id in self.queued:
            raise StorageError(f"queued message {message.id} is already stored")
        if message.client_message_id is not None and any(
            q.session_id == message.session_id and q.client_message_id == message.client_message_id
            for q in self.queued.values()
        ):
            raise StorageError(
                f"session {message.session_id} already has a message with client_message_id "
                f"{message.client_message_id}"
            )
        stored = row(replace(message, seq=self.next_seq(message.session_id, "queue"), blobs=()))
        self.queued[message.id] = stored
        for blob in message.blobs:
            self.attachments.setdefault(blob.sha256, blob)
            self.attachments_stored[blob.sha256] = message.created_at
            self.attachment_refs.setdefault((message.session_id, blob.sha256), message.created_at)
        return stored


class MemoryDatabase:
    """One in-memory database. Every `MemoryStore` opened on it sees the same data, as every
    process sees the same SQLite file; it lasts as long as this object."""

    def __init__(self) -> None:
        self.tables = MemoryTables()
        # Serializes writers across every handle (SQLite's write lock); readers never take it.
        self.lock = anyio.Lock()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[MemoryTables]:
        """A write transaction: a copy of the tables to change, committed when the block ends
        without an error, and dropped (nothing written) when it raises or is cancelled."""
        async with self.lock:
            draft = self.tables.copy()
            yield draft
            self.tables = draft
