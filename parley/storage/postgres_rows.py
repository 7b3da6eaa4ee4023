"""PostgreSQL rows <-> records: the column lists, which columns hold JSON, and the mappers.

Columns are named as the records' fields (and as SQLite's columns), so a row maps to a record
by name. Two kinds of column are `json` in PostgreSQL:

- the JSON values (todos, arguments, results, payloads...), kept as the exact text written, as
  SQLite keeps them (`jsonb` would reorder keys and refuses the escape \\u0000);
- text that comes from users, models and tools (a message, an answer, an error, a summary),
  stored as a JSON string: PostgreSQL `text` cannot hold U+0000, which a message may carry and
  which SQLite stores as sent.

psycopg hands both back decoded (a str for the second kind), so the mappers only pair names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.types.json import Json

from parley.storage.base import (
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


def _names(listing: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in listing.split(","))


SESSION_FIELDS = _names(
    "id, agent, owner, kind, status, phase, created_at, updated_at, turn_count, current_turn_id, "
    "last_turn_id, last_error, closed_reason, input_tokens, output_tokens, model_calls, todos, "
    "cancel_requested_turn, close_requested, lease_owner, lease_expires_at, result, inputs, "
    "start_client_message_id, wake_at, settings, cached_tokens, lease_epoch, title, tags"
)
TURN_FIELDS = _names(
    "id, session_id, seq, status, queued_message_id, started_at, ended_at, answer, error, "
    "model_calls, input_tokens, output_tokens, result, settings, cached_tokens, agent_version"
)
QUEUED_FIELDS = _names(
    "id, session_id, seq, text, status, turn_id, created_at, client_message_id, steer, settings, "
    "attachments, trace_context"
)
CALL_FIELDS = _names(
    "id, session_id, turn_id, step_no, call_index, name, arguments, status, effect, result, "
    "attempts, idempotency_key, created_at, updated_at, source, server, tool, requires_approval, "
    "wake_at, decision, remote"
)
INTERRUPT_FIELDS = _names(
    "id, session_id, turn_id, tool_call_id, kind, status, payload, created_at, deadline, resolution, "
    "resolved_by, resolved_at"
)
MESSAGE_FIELDS = _names("session_id, seq, turn_id, role, content, created_at")
EVENT_FIELDS = _names("session_id, seq, turn_id, kind, data, created_at")
STEP_FIELDS = _names(
    "session_id, turn_id, step_no, kind, process_id, input_tokens, output_tokens, created_at"
)
TASK_FIELDS = _names(
    "id, owner, generation, tool, session_id, queued_message_id, turn_id, status, status_message, "
    "result, ttl_ms, poll_interval_ms, created_at, updated_at, expires_at"
)

# Per table: the text from outside, stored as a JSON string (SQLite: plain text).
TEXT_AS_JSON: dict[str, frozenset[str]] = {
    "sessions": frozenset({"last_error", "closed_reason", "title"}),
    "turns": frozenset({"answer", "error"}),
    "tool_calls": frozenset({"name"}),
    "queued_messages": frozenset({"text"}),
    "summaries": frozenset({"text"}),
    "tasks": frozenset({"status_message"}),
}
# Per table: every column stored as `json` (the JSON values, and the text above).
JSON_COLUMNS: dict[str, frozenset[str]] = {
    table: values | TEXT_AS_JSON.get(table, frozenset())
    for table, values in {
        "sessions": frozenset({"todos", "result", "inputs", "settings", "tags"}),
        "turns": frozenset({"result", "settings"}),
        "tool_calls": frozenset({"arguments", "result", "remote"}),
        "interrupts": frozenset({"payload", "resolution"}),
        "queued_messages": frozenset({"settings", "attachments", "trace_context"}),
        "messages": frozenset({"content"}),
        "events": frozenset({"data"}),
        "summaries": frozenset(),
        "tasks": frozenset({"result"}),
        "steps": frozenset(),
        "agent_versions": frozenset({"definition"}),
    }.items()
}
# Per table: the columns a change may write (the record's fields).
WRITABLE: dict[str, frozenset[str]] = {
    "sessions": frozenset(SESSION_FIELDS),
    "turns": frozenset(TURN_FIELDS),
    "tool_calls": frozenset(CALL_FIELDS),
    "interrupts": frozenset(INTERRUPT_FIELDS),
    "queued_messages": frozenset(QUEUED_FIELDS),
}
# Booleans (SQLite keeps 0/1; a change may name either).
BOOL_COLUMNS = frozenset({"close_requested", "steer", "requires_approval"})


def listing(fields: Sequence[str]) -> str:
    return ", ".join(fields)


def dumps(value: Any) -> str:
    """JSON as SQLite's backend writes it (so a value reads back the same on both)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_value(value: Any) -> Json | None:
    """A parameter for a `json` column; None stays SQL NULL, as on SQLite."""
    return Json(value, dumps=dumps) if value is not None else None


def column_value(table: str, column: str, value: Any) -> Any:
    """A record field's value as the parameter for its column."""
    if column in JSON_COLUMNS[table]:
        return json_value(value)
    if column in BOOL_COLUMNS and value is not None:
        return bool(value)
    return value


def _fields(names: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(names, row, strict=True))


def session_row(row: Sequence[Any]) -> SessionRecord:
    return SessionRecord(**_fields(SESSION_FIELDS, row))


def turn_row(row: Sequence[Any]) -> TurnRecord:
    return TurnRecord(**_fields(TURN_FIELDS, row))


def queued_row(row: Sequence[Any]) -> QueuedMessageRecord:
    return QueuedMessageRecord(**_fields(QUEUED_FIELDS, row))


def call_row(row: Sequence[Any]) -> ToolCallRecord:
    values = _fields(CALL_FIELDS, row)
    values["remote"] = values["remote"] or None  # as SQLite's mapper reads an empty value
    return ToolCallRecord(**values)


def interrupt_row(row: Sequence[Any]) -> InterruptRecord:
    return InterruptRecord(**_fields(INTERRUPT_FIELDS, row))


def message_row(row: Sequence[Any]) -> MessageRecord:
    return MessageRecord(**_fields(MESSAGE_FIELDS, row))


def event_row(row: Sequence[Any]) -> EventRecord:
    return EventRecord(**_fields(EVENT_FIELDS, row))


def step_row(row: Sequence[Any]) -> StepRecord:
    return StepRecord(**_fields(STEP_FIELDS, row))


def task_row(row: Sequence[Any]) -> TaskRecord:
    values = _fields(TASK_FIELDS, row)
    # As SQLite's mapper reads them: an empty value is none.
    for name in ("result", "session_id", "queued_message_id", "turn_id"):
        values[name] = values[name] or None
    return TaskRecord(**values)


def record_values(table: str, fields: Sequence[str], record: Any) -> list[Any]:
    """The parameters that insert `record` into `table`'s columns `fields`."""
    return [column_value(table, name, getattr(record, name)) for name in fields]


def change_values(table: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    return {name: column_value(table, name, value) for name, value in changes.items()}
