"""Rows <-> records for both databases: the columns of each table, which of them hold JSON, outside
text or flags, and the mappers.

Columns are named as the records' fields, so a row maps to a record by name. JSON values are
text on SQLite and `json` on PostgreSQL (kept as the exact text written: `jsonb` would reorder
keys and refuses the escape \\u0000); text from users, models and tools is plain text on SQLite
and a JSON string on PostgreSQL (see Dialect.outside_text). Flags are 0/1 on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parley.core.records import (
    AuditRecord,
    EventRecord,
    InterruptRecord,
    MessageRecord,
    QueuedMessageRecord,
    SessionRecord,
    StepRecord,
    TaskRecord,
    ToolCallRecord,
    TurnRecord,
)
from parley.storage.sql.dialect import Dialect
from parley.storage.sql.program import Row


def columns(listing: str) -> tuple[str, ...]:
    """Column names from a listing "a, b, c"."""
    return tuple(c.strip() for c in listing.split(","))


FIELDS: dict[str, tuple[str, ...]] = {
    "sessions": columns(
        "id, agent, owner, kind, status, phase, created_at, updated_at, turn_count, current_turn_id, "
        "last_turn_id, last_error, closed_reason, input_tokens, output_tokens, model_calls, todos, "
        "cancel_requested_turn, close_requested, lease_owner, lease_expires_at, result, inputs, "
        "start_client_message_id, wake_at, settings, cached_tokens, lease_epoch, title, tags, "
        "plan_status, plan_revision, plan_approved, planning, parent_session_id, parent_turn, agent_version_pin, "
        "replay_of, owner_credentials"
    ),
    "turns": columns(
        "id, session_id, seq, status, queued_message_id, started_at, ended_at, answer, error, "
        "model_calls, input_tokens, output_tokens, result, settings, cached_tokens, agent_version, mode"
    ),
    "queued_messages": columns(
        "id, session_id, seq, text, status, turn_id, created_at, client_message_id, steer, settings, "
        "attachments, trace_context, mode"
    ),
    "tool_calls": columns(
        "id, session_id, turn_id, step_no, call_index, name, arguments, status, effect, result, "
        "attempts, idempotency_key, created_at, updated_at, source, server, tool, requires_approval, "
        "wake_at, decision, remote"
    ),
    "interrupts": columns(
        "id, session_id, turn_id, tool_call_id, kind, status, payload, created_at, deadline, resolution, "
        "resolved_by, resolved_at"
    ),
    "messages": columns("session_id, seq, turn_id, role, content, created_at"),
    "events": columns("session_id, seq, turn_id, kind, data, created_at"),
    "steps": columns(
        "session_id, turn_id, step_no, kind, process_id, input_tokens, output_tokens, created_at"
    ),
    "tasks": columns(
        "id, owner, generation, tool, session_id, queued_message_id, turn_id, status, status_message, "
        "result, ttl_ms, poll_interval_ms, created_at, updated_at, expires_at"
    ),
    "audit": columns("id, at, principal, client, action, outcome, session_id, target, detail"),
}

# Per table: the text from outside (PostgreSQL: a JSON string).
TEXT_AS_JSON: dict[str, frozenset[str]] = {
    "sessions": frozenset({"last_error", "closed_reason", "title"}),
    "turns": frozenset({"answer", "error"}),
    "tool_calls": frozenset({"name"}),
    "queued_messages": frozenset({"text"}),
    "summaries": frozenset({"text"}),
    "tasks": frozenset({"status_message"}),
}
# Per table: the JSON values.
JSON_VALUES: dict[str, frozenset[str]] = {
    "sessions": frozenset({"todos", "result", "inputs", "settings", "tags"}),
    "turns": frozenset({"result", "settings"}),
    "tool_calls": frozenset({"arguments", "result", "remote"}),
    "interrupts": frozenset({"payload", "resolution"}),
    "queued_messages": frozenset({"settings", "attachments", "trace_context"}),
    "messages": frozenset({"content"}),
    "events": frozenset({"data"}),
    "tasks": frozenset({"result"}),
    "audit": frozenset({"detail"}),
    "agent_versions": frozenset({"definition"}),
}
# Flags (SQLite keeps 0/1).
BOOL_COLUMNS = frozenset({"close_requested", "steer", "requires_approval", "planning", "owner_credentials"})
# Columns where an empty value is none (as the records read them).
_EMPTY_IS_NONE: dict[str, frozenset[str]] = {
    "tool_calls": frozenset({"remote"}),
    "tasks": frozenset({"result", "session_id", "queued_message_id", "turn_id"}),
    "audit": frozenset({"session_id"}),
}
# The columns a decision's change may write, per table.
WRITABLE: dict[str, frozenset[str]] = {
    table: frozenset(FIELDS[table])
    for table in ("sessions", "turns", "tool_calls", "interrupts", "queued_messages")
}


def listing(table: str, alias: str = "") -> str:
    """The table's columns, in record order, as a SELECT lists them."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + name for name in FIELDS[table])


# The column lists the queries select most.
SESSION_COLUMNS = listing("sessions")
TURN_COLUMNS = listing("turns")
QUEUED_COLUMNS = listing("queued_messages")
CALL_COLUMNS = listing("tool_calls")
INTERRUPT_COLUMNS = listing("interrupts")

_RECORDS: dict[str, Callable[..., Any]] = {
    "sessions": SessionRecord,
    "turns": TurnRecord,
    "queued_messages": QueuedMessageRecord,
    "tool_calls": ToolCallRecord,
    "interrupts": InterruptRecord,
    "messages": MessageRecord,
    "events": EventRecord,
    "steps": StepRecord,
    "tasks": TaskRecord,
    "audit": AuditRecord,
}


def _empty_is_none(value: Any) -> Any:
    return value or None


class Codec:
    """Parameters and records of one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._encoders: dict[str, dict[str, Callable[[Any], Any]]] = {}
        # Per table: (field name, its decoder or None) in column order.
        self._decoders: dict[str, tuple[tuple[str, Callable[[Any], Any] | None], ...]] = {}
        for table in (*FIELDS, "summaries", "agent_versions"):
            encoders: dict[str, Callable[[Any], Any]] = {}
            for column in JSON_VALUES.get(table, ()):
                encoders[column] = dialect.json
            for column in TEXT_AS_JSON.get(table, ()):
                encoders[column] = dialect.outside_text
            self._encoders[table] = encoders
        for table, names in FIELDS.items():
            self._decoders[table] = tuple((name, self._decoder(table, name)) for name in names)

    def _decoder(self, table: str, name: str) -> Callable[[Any], Any] | None:
        if name in JSON_VALUES.get(table, ()):
            load = self.dialect.load_json
            if name in _EMPTY_IS_NONE.get(table, ()):
                return lambda value: load(value) if value else None
            return load
        if name in BOOL_COLUMNS:
            return bool
        if name in _EMPTY_IS_NONE.get(table, ()):
            return _empty_is_none
        return None

    # ------------------------------------------------------------------ parameters

    def param(self, table: str, column: str, value: Any) -> Any:
        """A record field's value as the parameter for its column."""
        encode = self._encoders[table].get(column)
        if encode is not None:
            return encode(value)
        if column in BOOL_COLUMNS and value is not None:
            return bool(value)
        return value

    def typed_placeholders(self, table: str) -> str:
        """A placeholder per column of `table`, cast to the column's type where the database cannot
        tell it from the parameter (a NULL for a `json` column in `INSERT ... SELECT`)."""
        json_type = self.dialect.json_type
        encoded = JSON_VALUES.get(table, frozenset()) | TEXT_AS_JSON.get(table, frozenset())
        return ", ".join(
            f"CAST(? AS {json_type})" if json_type and name in encoded else "?" for name in FIELDS[table]
        )

    def params(self, table: str, values: Mapping[str, Any]) -> dict[str, Any]:
        return {column: self.param(table, column, value) for column, value in values.items()}

    def record_params(self, table: str, record: Any, **given: Any) -> list[Any]:
        """The parameters that insert `record` into every column of `table` (`given` overrides)."""
        return [
            self.param(table, name, given[name] if name in given else getattr(record, name))
            for name in FIELDS[table]
        ]

    # ------------------------------------------------------------------ records

    def record(self, table: str, row: Sequence[Any]) -> Any:
        values = {
            name: (decode(value) if decode is not None and value is not None else value)
            for (name, decode), value in zip(self._decoders[table], row, strict=True)
        }
        return _RECORDS[table](**values)

    def session(self, row: Row) -> SessionRecord:
        record: SessionRecord = self.record("sessions", row)
        return record

    def turn(self, row: Row) -> TurnRecord:
        record: TurnRecord = self.record("turns", row)
        return record

    def queued(self, row: Row) -> QueuedMessageRecord:
        record: QueuedMessageRecord = self.record("queued_messages", row)
        return record

    def call(self, row: Row) -> ToolCallRecord:
        record: ToolCallRecord = self.record("tool_calls", row)
        return record

    def interrupt(self, row: Row) -> InterruptRecord:
        record: InterruptRecord = self.record("interrupts", row)
        return record

    def task(self, row: Row) -> TaskRecord:
        record: TaskRecord = self.record("tasks", row)
        return record

    def audit(self, row: Row) -> AuditRecord:
        record: AuditRecord = self.record("audit", row)
        return record
