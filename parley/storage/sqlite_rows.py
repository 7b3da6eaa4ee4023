"""SQLite rows <-> records: the column lists and the mappers every part of the store shares."""

from __future__ import annotations

import json
import sqlite3

from parley.storage.base import (
    InterruptRecord,
    QueuedMessageRecord,
    SessionRecord,
    ToolCallRecord,
    TurnRecord,
)

SESSION_COLUMNS = (
    "id, agent, owner, kind, status, phase, created_at, updated_at, turn_count, current_turn_id, "
    "last_turn_id, last_error, closed_reason, input_tokens, output_tokens, model_calls, todos, "
    "cancel_requested_turn, close_requested, lease_owner, lease_expires_at, result, inputs, start_client_message_id, "
    "wake_at, settings, cached_tokens, lease_epoch, title, tags"
)
TURN_COLUMNS = (
    "id, session_id, seq, status, queued_message_id, started_at, ended_at, answer, error, "
    "model_calls, input_tokens, output_tokens, result, settings, cached_tokens, agent_version"
)
QUEUED_COLUMNS = (
    "id, session_id, seq, text, status, turn_id, created_at, client_message_id, steer, settings, "
    "attachments, trace_context"
)
CALL_COLUMNS = (
    "id, session_id, turn_id, step_no, call_index, name, arguments, status, effect, result, "
    "attempts, idempotency_key, created_at, updated_at, source, server, tool, requires_approval, wake_at, decision, "
    "remote"
)
INTERRUPT_COLUMNS = (
    "id, session_id, turn_id, tool_call_id, kind, status, payload, created_at, deadline, resolution, "
    "resolved_by, resolved_at"
)


def session_row(row: sqlite3.Row) -> SessionRecord:
    return SessionRecord(
        id=row["id"],
        agent=row["agent"],
        owner=row["owner"],
        kind=row["kind"],
        status=row["status"],
        phase=row["phase"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        turn_count=row["turn_count"],
        current_turn_id=row["current_turn_id"],
        last_turn_id=row["last_turn_id"],
        last_error=row["last_error"],
        closed_reason=row["closed_reason"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        model_calls=row["model_calls"],
        todos=json.loads(row["todos"]),
        cancel_requested_turn=row["cancel_requested_turn"],
        close_requested=bool(row["close_requested"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        lease_epoch=row["lease_epoch"],
        result=json.loads(row["result"]) if row["result"] is not None else None,
        inputs=json.loads(row["inputs"]) if row["inputs"] is not None else None,
        start_client_message_id=row["start_client_message_id"],
        wake_at=row["wake_at"],
        settings=json.loads(row["settings"]),
        cached_tokens=row["cached_tokens"],
        title=row["title"],
        tags=json.loads(row["tags"]),
    )


def turn_row(row: sqlite3.Row) -> TurnRecord:
    return TurnRecord(
        id=row["id"],
        session_id=row["session_id"],
        seq=row["seq"],
        status=row["status"],
        queued_message_id=row["queued_message_id"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        answer=row["answer"],
        error=row["error"],
        model_calls=row["model_calls"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        result=json.loads(row["result"]) if row["result"] is not None else None,
        settings=json.loads(row["settings"]),
        cached_tokens=row["cached_tokens"],
        agent_version=row["agent_version"],
    )


def call_row(row: sqlite3.Row) -> ToolCallRecord:
    return ToolCallRecord(
        id=row["id"],
        session_id=row["session_id"],
        turn_id=row["turn_id"],
        step_no=row["step_no"],
        call_index=row["call_index"],
        name=row["name"],
        arguments=json.loads(row["arguments"]),
        status=row["status"],
        effect=row["effect"],
        result=json.loads(row["result"]) if row["result"] is not None else None,
        attempts=row["attempts"],
        idempotency_key=row["idempotency_key"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        source=row["source"],
        server=row["server"],
        tool=row["tool"],
        requires_approval=bool(row["requires_approval"]),
        wake_at=row["wake_at"],
        decision=row["decision"],
        remote=json.loads(row["remote"]) if row["remote"] else None,
    )


def interrupt_row(row: sqlite3.Row) -> InterruptRecord:
    return InterruptRecord(
        id=row["id"],
        session_id=row["session_id"],
        turn_id=row["turn_id"],
        tool_call_id=row["tool_call_id"],
        kind=row["kind"],
        status=row["status"],
        payload=json.loads(row["payload"]),
        created_at=row["created_at"],
        deadline=row["deadline"],
        resolution=json.loads(row["resolution"]) if row["resolution"] is not None else None,
        resolved_by=row["resolved_by"],
        resolved_at=row["resolved_at"],
    )


def queued_row(row: sqlite3.Row) -> QueuedMessageRecord:
    return QueuedMessageRecord(
        id=row["id"],
        session_id=row["session_id"],
        seq=row["seq"],
        text=row["text"],
        status=row["status"],
        turn_id=row["turn_id"],
        created_at=row["created_at"],
        client_message_id=row["client_message_id"],
        steer=bool(row["steer"]),
        settings=json.loads(row["settings"]) if row["settings"] is not None else None,
        attachments=json.loads(row["attachments"]) if row["attachments"] is not None else None,
        trace_context=json.loads(row["trace_context"]) if row["trace_context"] is not None else None,
    )
