"""The engine's rules for what events do to a session: pure functions of (snapshot, event, now)
that return the changes to write (DESIGN §4.8).

No I/O, no clock, no ids: the caller loads the snapshot and writes the changes in one
transaction (parley/storage/changes.py), so a decision is never written from a stale snapshot.
The text the model reads about a decision is built here too, never in storage.

Moved here so far: resolving an interrupt (first decision wins), parking a turn, finishing a
turn, and letting a session rest. The other steps still decide in the driver and the store.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from parley.runtime.effect_policy import abandoned_status
from parley.storage.base import (
    InterruptRecord,
    Resolution,
    ResolveResult,
    SessionStatus,
    ToolCallStatus,
    TurnStatus,
)
from parley.storage.changes import Changes, NewEvent, NewMessage, SessionSnapshot

# A session in one of these has ended; nothing changes it back.
ENDED_SESSION = frozenset({"closed", "completed", "failed"})
# Calls that still wait for something: a person, a timer, a downstream task.
WAITING_CALLS = frozenset({"pending_approval", "awaiting_answer", "waiting_for_timer", "waiting_for_task"})
RUNNABLE_CALLS = frozenset({"pending", "running"})
TIMED_CALLS = frozenset({"waiting_for_timer", "waiting_for_task"})


# ---------------------------------------------------------------------- interrupts


def resolution_text(kind: str, resolution: Resolution) -> tuple[str, ToolCallStatus, str]:
    """The tool result the model reads, the call's final status, and the interrupt's status."""
    if kind == "approval":
        if resolution.expired:
            return "No one approved this call before its deadline, so it was not run.", "rejected", "expired"
        reason = f": {resolution.reason}" if resolution.reason else ""
        return f"A person declined this call{reason}. It was not run.", "rejected", "rejected"
    if resolution.expired:
        return "The question was not answered before its deadline.", "succeeded", "expired"
    if resolution.declined:
        reason = f" ({resolution.reason})" if resolution.reason else ""
        return f"The user declined to answer{reason}.", "succeeded", "declined"
    return f"The user answered: {resolution.answer}", "succeeded", "answered"


def asked_of_server(interrupt: InterruptRecord) -> bool:
    """A question a downstream server asked about one of its calls (runtime/downstream_questions.py)."""
    return interrupt.kind == "question" and bool(interrupt.payload.get("downstream"))


def asked_in_place(interrupt: InterruptRecord) -> bool:
    """...asked while the call is still open at the server (rather than to be sent with a retry)."""
    return asked_of_server(interrupt) and interrupt.payload["downstream"].get("mode") != "retry"


def same_decision(existing: dict[str, Any] | None, new: Resolution) -> bool:
    """Whether `new` repeats the decision already recorded (a repeat succeeds, a change is refused)."""
    existing = existing or {}
    if existing.get("expired"):
        return False
    if "approved" in existing or new.approved is not None:
        return bool(existing.get("approved", False)) == bool(new.approved)
    if existing.get("declined") or new.declined:
        return bool(existing.get("declined")) == new.declined
    return existing.get("answer") == new.answer


def resolve_interrupt(
    snapshot: SessionSnapshot,
    interrupt_id: str,
    resolution: Resolution,
    by: str,
    now: float,
    owner: str | None = None,
) -> tuple[ResolveResult, Changes]:
    """A decision on an interrupt. The first decision wins: a repeat of it is "already resolved",
    a different one a "conflict"; either changes nothing."""
    changes = Changes()
    interrupt = snapshot.interrupt(interrupt_id)
    if interrupt is None or (owner is not None and snapshot.session.owner != owner):
        return ResolveResult(outcome="not_found"), changes
    is_approval = resolution.approved is not None
    if not resolution.expired and is_approval != (interrupt.kind == "approval"):
        return ResolveResult(outcome="wrong_kind", interrupt=interrupt), changes
    if interrupt.status != "pending":
        if interrupt.status == "cancelled":
            return ResolveResult(outcome="not_pending", interrupt=interrupt), changes
        same = same_decision(interrupt.resolution, resolution)
        return ResolveResult(outcome="already_resolved" if same else "conflict", interrupt=interrupt), changes

    text, call_status, interrupt_status = resolution_text(interrupt.kind, resolution)
    if interrupt.kind == "approval" and resolution.approved and not resolution.expired:
        interrupt_status = "approved"
    resolved = replace(
        interrupt,
        status=interrupt_status,  # type: ignore[arg-type]
        resolution=resolution.as_dict(),
        resolved_by=by,
        resolved_at=now,
    )
    changes.interrupts[interrupt.id] = {
        "status": resolved.status,
        "resolution": resolved.resolution,
        "resolved_by": by,
        "resolved_at": now,
    }
    call = snapshot.call(interrupt.tool_call_id)
    if asked_of_server(interrupt):
        # Answered what a server asked: once nothing else of the call is pending, the call is
        # ready to go back to its server with the answers (asked in place: the open call takes
        # the answer itself).
        others_pending = any(
            i.status == "pending" and i.id != interrupt.id and i.tool_call_id == interrupt.tool_call_id
            for i in snapshot.interrupts
        )
        retry_ready = call is not None and call.status == "awaiting_answer" and not others_pending
        if retry_ready and call is not None and not asked_in_place(interrupt):
            changes.calls[call.id] = {"status": "pending"}
    elif call is not None:
        if interrupt_status == "approved":
            # Ready to run: the driver runs approved calls without asking again.
            changes.calls[call.id] = {"status": "pending", "decision": "approved"}
        else:
            result: dict[str, Any] = {"text": text, "is_error": call_status == "rejected"}
            if interrupt.kind == "question":
                result["answer"] = resolution.answer
                result["declined"] = resolution.declined or resolution.expired
            changes.calls[call.id] = {"status": call_status, "result": result, "decision": interrupt_status}
            content = {"tool_call_id": call.id, "name": call.name, "status": call_status, **result}
            changes.messages.append(NewMessage(interrupt.turn_id, "tool", content))
    if snapshot.session.status == "waiting_for_input":
        # Back in the scheduler's sight: it looks for running sessions without a lease.
        changes.session.update(status="running", wake_at=None)
    changes.events.append(
        NewEvent(
            interrupt.turn_id,
            "interrupt_resolved",
            {"interrupt_id": interrupt.id, "status": interrupt_status, "by": by},
        )
    )
    return ResolveResult(outcome="resolved", interrupt=resolved), changes


# ---------------------------------------------------------------------- parking and ending turns


def park_turn(snapshot: SessionSnapshot) -> Changes | None:
    """Park the turn when nothing of it can run now and something waits (a person, a timer, a
    downstream task): the process then holds no task and no lease for it. None: not parked."""
    turn = snapshot.turn
    if turn is None:
        return None
    runnable = any(c.status in RUNNABLE_CALLS for c in snapshot.calls)
    waiting = any(c.status in WAITING_CALLS for c in snapshot.calls)
    if runnable or not waiting:
        return None
    pending = [i for i in snapshot.interrupts if i.status == "pending"]
    wakes = [c.wake_at for c in snapshot.calls if c.status in TIMED_CALLS and c.wake_at is not None]
    wakes += [i.deadline for i in pending if i.deadline is not None]
    wake_at = min(wakes, default=None)
    waiting_for_input = bool(pending)
    changes = Changes()
    changes.session.update(
        status="waiting_for_input" if waiting_for_input else "running",
        phase=None if waiting_for_input else "waiting",
        wake_at=wake_at,
    )
    changes.events.append(
        NewEvent(turn.id, "turn_parked", {"waiting_for_input": waiting_for_input, "wake_at": wake_at})
    )
    return changes


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd:
    """How a turn ends, as the driver decided it (runtime/machine.py and the driver's limits)."""

    status: TurnStatus
    answer: str | None = None
    error: str | None = None
    result: Any = None
    # A session-level limit of a chat session closes it with this reason.
    close_reason: str | None = None
    # A task session ends with its turn: completed or failed.
    session_status: SessionStatus | None = None


def finish_turn(snapshot: SessionSnapshot, end: TurnEnd, now: float) -> Changes:
    """End the snapshot's turn: what it left behind is settled, then the session closes, ends
    (task sessions) or rests (idle, or running on with its queue)."""
    turn = snapshot.turn
    assert turn is not None, "finish_turn needs the turn in the snapshot"
    changes = Changes()
    for call in snapshot.calls:
        if not call.is_final:
            changes.calls[call.id] = {"status": abandoned_status(call.effect, call.status)}
    for interrupt in snapshot.interrupts:
        if interrupt.status == "pending":
            changes.interrupts[interrupt.id] = {
                "status": "cancelled",
                "resolved_at": now,
                "resolved_by": "turn_end",
            }
    changes.turn.update(
        status=end.status, answer=end.answer, error=end.error, ended_at=now, result=end.result
    )
    session = snapshot.session
    close_reason = end.close_reason
    if close_reason is None and session.close_requested:
        close_reason = session.closed_reason or "closed by the caller"
    changes.session.update(current_turn_id=None, cancel_requested_turn=None, phase=None, wake_at=None)
    if end.error is not None:
        changes.session["last_error"] = end.error
    changes.events.append(NewEvent(turn.id, "turn_ended", {"status": end.status, "error": end.error}))
    if end.session_status is not None:
        _drop_queue(snapshot, changes)
        changes.session["status"] = end.session_status
        if end.result is not None:
            changes.session["result"] = end.result
        changes.events.append(NewEvent(None, f"session_{end.session_status}", {"error": end.error}))
        return changes
    if close_reason is not None:
        _drop_queue(snapshot, changes)
        changes.session.update(status="closed", closed_reason=close_reason)
        changes.events.append(NewEvent(None, "session_closed", {"reason": close_reason}))
        return changes
    _settle(snapshot, changes)
    return changes


def rest_session(snapshot: SessionSnapshot) -> tuple[bool, Changes]:
    """A running session with no turn: it closes (if a close was asked), runs on (a message is
    queued) or rests. Returns whether it rests."""
    changes = Changes()
    session = snapshot.session
    if session.current_turn_id is not None:
        return False, changes
    if session.close_requested:
        changes.session.update(status="closed", phase=None)
        changes.events.append(NewEvent(None, "session_closed", {"reason": session.closed_reason}))
        return True, changes
    return _settle(snapshot, changes), changes


def _settle(snapshot: SessionSnapshot, changes: Changes) -> bool:
    """Running with a queue stays running; otherwise idle. True when the session rests. A session
    that ended meanwhile (closed while this process held the lease) stays ended."""
    if snapshot.session.status in ENDED_SESSION:
        return True
    if snapshot.queued:
        changes.session.update(status="running", phase="queued")
        return False
    changes.session.update(status="idle", phase=None)
    return True


def _drop_queue(snapshot: SessionSnapshot, changes: Changes) -> None:
    for queued in snapshot.queued:
        changes.queued[queued.id] = {"status": "dropped"}
