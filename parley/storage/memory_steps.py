"""The step port in memory: a session's snapshot loaded, the decision made and its changes
written under the database's lock, committed together (see parley/storage/changes.py).
The same row mapping as sqlite_steps.py, and no rule."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from parley.errors import LeaseLost, StorageError
from parley.ids import SessionId, TurnId
from parley.storage.base import InterruptRecord, StepRecord, ToolCallRecord
from parley.storage.changes import Changes, SessionSnapshot, SnapshotScope
from parley.storage.memory_access import insert_audit
from parley.storage.memory_tables import MemoryTables, row, updated
from parley.storage.memory_tasks import MemoryTasks

T = TypeVar("T")


def load_snapshot(
    tables: MemoryTables, session_id: SessionId, scope: SnapshotScope
) -> SessionSnapshot | None:
    """The snapshot sqlite_steps.load_snapshot loads, from the same rows."""
    turn_id, interrupt_id, call_id = scope.turn_id, scope.interrupt_id, scope.call_id
    message_id, client_message_id = scope.message_id, scope.client_message_id
    session = tables.sessions.get(session_id)
    if session is None:
        return None
    if interrupt_id is not None:
        interrupt = tables.interrupts.get(interrupt_id)
        turn_id = interrupt.turn_id if interrupt is not None and interrupt.session_id == session_id else None
    elif call_id is not None:
        call = tables.calls.get(call_id)
        turn_id = call.turn_id if call is not None and call.session_id == session_id else None
    else:
        turn_id = turn_id or session.current_turn_id
    if not scope.turn:
        turn_id = None
    queued = (
        sorted(
            (q for q in tables.queued.values() if q.session_id == session_id and q.status == "queued"),
            key=lambda q: q.seq,
        )
        if scope.queue
        else []
    )
    message = tables.queued.get(message_id) if message_id is not None else None
    sent = (
        next(
            (
                q
                for q in tables.queued.values()
                if q.session_id == session_id and q.client_message_id == client_message_id
            ),
            None,
        )
        if client_message_id is not None
        else None
    )
    if message is not None and message.session_id != session_id:
        message = None
    turn = tables.turns.get(turn_id) if turn_id is not None else None
    return SessionSnapshot(
        session=row(session),
        turn=row(turn) if turn is not None and turn.session_id == session_id else None,
        # A turn named but not found still loads its calls and interrupts (as SQLite's queries do).
        calls=tuple(map(row, calls_of(tables, turn_id))) if turn_id is not None and scope.calls else (),
        interrupts=(
            tuple(map(row, interrupts_of(tables, turn_id)))
            if turn_id is not None and scope.interrupts
            else ()
        ),
        queued=tuple(map(row, queued)),
        message=row(message) if message is not None else None,
        sent=row(sent) if sent is not None else None,
    )


def calls_of(tables: MemoryTables, turn_id: TurnId) -> list[ToolCallRecord]:
    return sorted(
        (c for c in tables.calls.values() if c.turn_id == turn_id), key=lambda c: (c.step_no, c.call_index)
    )


def interrupts_of(tables: MemoryTables, turn_id: TurnId) -> list[InterruptRecord]:
    return sorted(
        (i for i in tables.interrupts.values() if i.turn_id == turn_id), key=lambda i: (i.created_at, i.id)
    )


def _insert_new(tables: MemoryTables, snapshot: SessionSnapshot, changes: Changes, now: float) -> None:
    """The new records of `changes`, with the columns (and defaults) SQLite's inserts write."""
    session_id = snapshot.session.id
    if changes.new_step is not None:
        step = changes.new_step
        key = (step.turn_id, step.kind, step.step_no)
        if key in tables.steps:
            raise LeaseLost(session_id)  # another process already committed this step
        tables.steps[key] = StepRecord(
            session_id=session_id,
            turn_id=step.turn_id,
            step_no=step.step_no,
            kind=step.kind,
            process_id=step.process_id,
            input_tokens=step.input_tokens,
            output_tokens=step.output_tokens,
            created_at=now,
        )
    if changes.new_agent_version is not None:
        version = changes.new_agent_version
        tables.agent_versions.setdefault((version.agent, version.version), row(version))
    if changes.new_turn is not None:
        new = changes.new_turn
        if new.id in tables.turns or any(
            t.session_id == session_id and t.seq == new.seq for t in tables.turns.values()
        ):
            raise StorageError(f"session {session_id} already has turn {new.id} or a turn numbered {new.seq}")
        # The columns SQLite's insert leaves to their defaults start from them here too.
        tables.turns[new.id] = row(
            replace(
                new,
                session_id=session_id,
                answer=None,
                error=None,
                model_calls=0,
                input_tokens=0,
                output_tokens=0,
                cached_tokens=0,
                result=None,
            )
        )
    for message in changes.new_queued:
        tables.insert_queued(replace(message, session_id=session_id))
    for call in changes.new_calls:
        if call.id in tables.calls or any(
            (c.turn_id, c.step_no, c.call_index) == (call.turn_id, call.step_no, call.call_index)
            for c in tables.calls.values()
        ):
            raise StorageError(f"tool call {call.id} (or its step and index) is already stored")
        tables.calls[call.id] = row(
            replace(
                call, session_id=session_id, result=None, attempts=0, wake_at=None, decision=None, remote=None
            )
        )
    for interrupt in changes.new_interrupts:
        if interrupt.id in tables.interrupts:
            raise StorageError(f"interrupt {interrupt.id} is already stored")
        tables.interrupts[interrupt.id] = row(
            InterruptRecord(
                id=interrupt.id,
                session_id=session_id,
                turn_id=interrupt.turn_id,
                tool_call_id=interrupt.tool_call_id,
                kind=interrupt.kind,
                status=interrupt.status,
                payload=interrupt.payload,
                created_at=interrupt.created_at,
                deadline=interrupt.deadline,
            )
        )


def apply_changes(tables: MemoryTables, snapshot: SessionSnapshot, changes: Changes, now: float) -> None:
    """Write `changes` into `tables`, in the order SqliteSteps' apply writes them."""
    session_id = snapshot.session.id
    _insert_new(tables, snapshot, changes, now)
    if changes.session and session_id in tables.sessions:
        tables.sessions[session_id] = updated(tables.sessions[session_id], changes.session, now)
    if changes.turn:
        if snapshot.turn is None:
            raise StorageError(f"a change to the turn of session {session_id}, which has none loaded")
        if snapshot.turn.id in tables.turns:
            tables.turns[snapshot.turn.id] = updated(tables.turns[snapshot.turn.id], changes.turn, now)
    # A change to a record that is not stored writes nothing, as an UPDATE that matches no row.
    for call_id, call_fields in changes.calls.items():
        if call_id in tables.calls:
            tables.calls[call_id] = updated(tables.calls[call_id], call_fields, now)
    for interrupt_id, interrupt_fields in changes.interrupts.items():
        if interrupt_id in tables.interrupts:
            tables.interrupts[interrupt_id] = updated(tables.interrupts[interrupt_id], interrupt_fields, now)
    for queued_id, queued_fields in changes.queued.items():
        if queued_id in tables.queued:
            tables.queued[queued_id] = updated(tables.queued[queued_id], queued_fields, now)
    for message in changes.messages:
        tables.append_message(session_id, message.turn_id, message.role, message.content, now)
    for event in changes.events:
        tables.append_event(session_id, event.turn_id, event.kind, event.data, now)
    for entry in changes.audit:
        insert_audit(tables, entry)


class MemorySteps(MemoryTasks):
    """`decide` and `snapshot` of the step port, for the in-memory store."""

    async def snapshot(self, session_id: SessionId, scope: SnapshotScope) -> SessionSnapshot | None:
        return load_snapshot(await self._committed(), session_id, scope)

    async def decide(
        self,
        session_id: SessionId,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
        now: float,
        *,
        lease: str | None = None,
    ) -> T:
        # The lock is held from the snapshot to the commit, so no other write comes between them.
        async with self._db.lock:
            tables = self._db.tables
            snapshot = load_snapshot(tables, session_id, scope)
            if snapshot is not None and lease is not None and snapshot.session.lease_owner != lease:
                raise LeaseLost(session_id)
            result, changes = decide(snapshot)
            if snapshot is not None and not changes.is_empty():
                # On a copy, so a write that fails half way leaves no part of itself behind.
                draft = tables.copy()
                apply_changes(draft, snapshot, changes, now)
                self._db.tables = draft
            return result
