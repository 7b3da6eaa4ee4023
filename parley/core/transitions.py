"""The engine's rules for what events do to a session: pure functions of (snapshot, event, now)
that return the changes to write.

No I/O, no clock, no ids: the caller loads the snapshot and writes the changes in one
transaction (parley/core/changes.py), so a decision is never written from a stale snapshot.
The text the model reads about a decision is built here too, never in storage.

Every write to a session's state is decided here or in parley/core/turn_steps.py (a turn's
steps, the interrupts and downstream calls they raise, timers): messages and the queue, cancel
and close, decisions on interrupts, parking, ending a turn and resting. What each event does:
docs/design.md#transitions; parking and waking, docs/design.md#parking-and-waking; a turn's end,
docs/design.md#ending-a-turn.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from parley.core.changes import Changes, NewEvent, NewMessage, SessionSnapshot
from parley.core.effect_policy import abandoned_status
from parley.core.ids import TurnId
from parley.core.machine import FinishTurn
from parley.core.records import (
    EnqueueOutcome,
    InterruptRecord,
    InterruptStatus,
    QueuedMessageRecord,
    Resolution,
    ResolveResult,
    SessionRecord,
    SessionStatus,
    ToolCallRecord,
    ToolCallStatus,
    TurnRecord,
    TurnStatus,
)
from parley.core.states import (
    DRIVEN_SESSION,
    ENDED_SESSION,
    RUNNABLE_CALLS,
    SESSION_AT_REST,
    TIMED_CALLS,
    WAITING_CALLS,
)

# ---------------------------------------------------------------------- interrupts


def resolution_text(kind: str, resolution: Resolution) -> tuple[str, ToolCallStatus, InterruptStatus]:
    """The tool result the model reads, the call's final status, and the interrupt's status."""
    if kind == "authorization_required":
        if resolution.expired:
            text = "The user did not connect their account before the connect link expired; the call was not sent."
            return text, "failed", "expired"
        if resolution.declined:
            reason = f" ({resolution.reason})" if resolution.reason else ""
            return (
                f"The user declined to connect their account{reason}; the call was not sent.",
                "failed",
                "declined",
            )
        return "The user connected their account.", "pending", "answered"
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


def task_under_way(call: ToolCallRecord) -> bool:
    """A call whose downstream task was started: it is followed by polls, never sent again."""
    return bool((call.remote or {}).get("task_id"))


def _task_given_up(call: ToolCallRecord) -> tuple[str, ToolCallStatus]:
    """A task's poll waited for the owner to connect again, and they did not: its result is lost."""
    text = (
        f"The user did not connect their account at {call.server} again, so the result of its "
        "downstream task could not be fetched."
    )
    if call.effect == "read":
        return text + " It only reads, so it is safe to call again.", "failed"
    return text + f" It may or may not have taken effect ({call.effect}); check before calling it again.", (
        "outcome_unknown"
    )


def opens_a_link(interrupt: InterruptRecord) -> bool:
    """An interrupt the session's owner resolves by opening a parley link, signed in: an account
    to connect (authorization_required), or a page a downstream server asks them to visit (its
    URL-mode elicitation). Only a decline of the latter is taken as an answer."""
    return interrupt.kind == "authorization_required" or (
        asked_of_server(interrupt) and interrupt.payload["downstream"].get("url") is not None
    )


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
        status=interrupt_status,
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
    _settle_call(snapshot, interrupt, resolution, (text, call_status, interrupt_status), now, changes)
    if snapshot.session.status == "waiting_for_input":
        # Back in the scheduler's sight: it looks for running sessions without a lease.
        changes.session.update({"status": "running", "wake_at": None})
    changes.events.append(
        NewEvent(
            interrupt.turn_id,
            "interrupt_resolved",
            {"interrupt_id": interrupt.id, "status": interrupt_status, "by": by},
        )
    )
    return ResolveResult(outcome="resolved", interrupt=resolved), changes


# ---------------------------------------------------------------------- parking and ending turns


def _settle_call(
    snapshot: SessionSnapshot,
    interrupt: InterruptRecord,
    resolution: Resolution,
    outcome: tuple[str, ToolCallStatus, InterruptStatus],
    now: float,
    changes: Changes,
) -> None:
    """What the decision does to the interrupt's call: back to its server, on to run, or ended
    with the text the model reads."""
    text, call_status, interrupt_status = outcome
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
    elif call is not None and interrupt.kind == "authorization_required" and call_status == "pending":
        if task_under_way(call):
            # A downstream task's poll waited for the token: the task is looked at again now
            # (the call was sent once already and is not sent again).
            changes.calls[call.id] = {"status": "waiting_for_task", "wake_at": now}
        else:
            # Connected: the call goes to its server now, once, with the owner's new token.
            changes.calls[call.id] = {"status": "pending"}
    elif call is not None:
        if interrupt.kind == "authorization_required" and task_under_way(call):
            text, call_status = _task_given_up(call)
        if interrupt_status == "approved":
            # Ready to run: the driver runs approved calls without asking again.
            changes.calls[call.id] = {"status": "pending", "decision": "approved"}
        else:
            result: dict[str, Any] = {"text": text, "is_error": call_status in ("rejected", "failed")}
            if interrupt.kind == "question":
                result["answer"] = resolution.answer
                result["declined"] = resolution.declined or resolution.expired
            changes.calls[call.id] = {"status": call_status, "result": result, "decision": interrupt_status}
            content = {"tool_call_id": call.id, "name": call.name, "status": call_status, **result}
            changes.messages.append(NewMessage(interrupt.turn_id, "tool", content))


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
        {
            "status": "waiting_for_input" if waiting_for_input else "running",
            "phase": None if waiting_for_input else "waiting",
            "wake_at": wake_at,
        }
    )
    changes.events.append(
        NewEvent(turn.id, "turn_parked", {"waiting_for_input": waiting_for_input, "wake_at": wake_at})
    )
    return changes


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd:
    """How a turn ends (see turn_end)."""

    status: TurnStatus
    answer: str | None = None
    error: str | None = None
    result: Any = None
    # A session-level limit of a chat session closes it with this reason.
    close_reason: str | None = None
    # A task session ends with its turn: completed or failed.
    session_status: SessionStatus | None = None


def turn_end(
    session: SessionRecord, action: FinishTurn, *, limit_reason: str | None, max_turns: int | None
) -> TurnEnd:
    """What ending a turn this way does to its session: a session-level limit closes a chat
    session; a task session ends with its turn when the turn completes or fails; a chat session
    that used its last turn is closed."""
    close_reason = None
    session_status: SessionStatus | None = None
    if limit_reason is not None and session.kind != "task":
        close_reason = limit_reason
    elif session.kind == "task" and action.status == "completed":
        session_status = "completed"
    elif session.kind == "task" and action.status == "failed":
        session_status = "failed"
    elif max_turns is not None and session.turn_count >= max_turns:
        close_reason = f"reached the limit of {max_turns} turns per session"
    return TurnEnd(
        status=action.status,
        answer=action.answer,
        error=action.error,
        result=action.result,
        close_reason=close_reason,
        session_status=session_status,
    )


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
        {
            "status": end.status,
            "answer": end.answer,
            "error": end.error,
            "ended_at": now,
            "result": end.result,
        }
    )
    session = snapshot.session
    close_reason = end.close_reason
    if close_reason is None and session.close_requested:
        close_reason = session.closed_reason or "closed by the caller"
    changes.session.update(
        {"current_turn_id": None, "cancel_requested_turn": None, "phase": None, "wake_at": None}
    )
    # The last turn's error: a later turn that ends without one clears it.
    changes.session["last_error"] = end.error
    if turn.mode == "executing" and end.status in ("cancelled", "failed") and session.plan_status == "active":
        # The approval did not carry the plan through: the same revision may be approved again.
        changes.session["plan_approved"] = 0
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
        changes.session.update({"status": "closed", "closed_reason": close_reason})
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
        changes.session.update({"status": "closed", "phase": None})
        changes.events.append(NewEvent(None, "session_closed", {"reason": session.closed_reason}))
        return True, changes
    return _settle(snapshot, changes), changes


def let_go_if_resting(snapshot: SessionSnapshot, changes: Changes) -> str | None:
    """A turn's end that leaves its session at rest (idle, or ended) lets go of the lease in the
    same transaction: nothing is left for a driver, and the next message is claimed at once. The
    status it rests in, or None when it runs on (a queued message) and the lease is kept."""
    status = changes.session.get("status", snapshot.session.status)
    if status not in SESSION_AT_REST:
        return None
    changes.session.update({"lease_owner": None, "lease_expires_at": None})
    return status


def _settle(snapshot: SessionSnapshot, changes: Changes) -> bool:
    """Running with a queue stays running; otherwise idle. True when the session rests. A session
    that ended meanwhile (closed while this process held the lease) stays ended."""
    if snapshot.session.status in ENDED_SESSION:
        return True
    if snapshot.queued:
        changes.session.update({"status": "running", "phase": "queued"})
        return False
    changes.session.update({"status": "idle", "phase": None})
    return True


def _drop_queue(snapshot: SessionSnapshot, changes: Changes) -> None:
    for queued in snapshot.queued:
        changes.queued[queued.id] = {"status": "dropped"}


# ---------------------------------------------------------------------- a new session


def starting(session: SessionRecord, first_message: QueuedMessageRecord | None) -> SessionRecord:
    """How a session starts: idle and ready, or running with its first message queued."""
    if first_message is None:
        return replace(session, status="idle", phase=None)
    return replace(session, status="running", phase="queued")


# ---------------------------------------------------------------------- messages and the queue


def queue_message(
    snapshot: SessionSnapshot, owner: str, message: QueuedMessageRecord, max_turns: int
) -> tuple[EnqueueOutcome, Changes]:
    """A caller's message for a session: queued behind the running turn (or steering it), unless
    the session is not the caller's, has ended, already has this client_message_id, or would
    exceed its turns."""
    changes = Changes()
    session = snapshot.session
    if session.owner != owner:
        return "not_found", changes
    if session.status in ENDED_SESSION or session.close_requested:
        return "closed", changes
    if message.client_message_id is not None and snapshot.sent is not None:
        return "duplicate", changes
    if session.turn_count + len(snapshot.queued) >= max_turns:
        return "turn_limit", changes
    changes.new_queued.append(replace(message, status="queued", turn_id=None))
    changes.events.append(NewEvent(None, "message_queued", {"queued_message_id": message.id}))
    if message.steer:
        _wake_for_steer(snapshot, changes, message.id)
    if session.status == "idle":
        # An idle session has work now; the scheduler looks for running sessions.
        changes.session.update({"status": "running", "phase": session.phase or "queued"})
    return "queued", changes


def _wake_for_steer(snapshot: SessionSnapshot, changes: Changes, message_id: str) -> None:
    """A parked turn has no driver to notice a steer: put it back in the scheduler's sight."""
    session = snapshot.session
    if session.current_turn_id is not None:
        changes.session["wake_at"] = None
        if session.status == "waiting_for_input":
            changes.session["status"] = "running"
    changes.events.append(NewEvent(None, "steer_requested", {"queued_message_id": message_id}))


def promote_to_steer(snapshot: SessionSnapshot, owner: str) -> tuple[QueuedMessageRecord | None, Changes]:
    """Make the snapshot's queued `message` steer the running turn (if it still waits)."""
    changes = Changes()
    message = snapshot.message
    if message is None or snapshot.session.owner != owner:
        return None, changes
    if message.status == "queued" and not message.steer:
        changes.queued[message.id] = {"steer": True}
        _wake_for_steer(snapshot, changes, message.id)
    return message, changes


def delete_queued(snapshot: SessionSnapshot, owner: str) -> tuple[QueuedMessageRecord | None, Changes]:
    """Drop the snapshot's queued `message` if no turn has taken it yet."""
    changes = Changes()
    message = snapshot.message
    if message is None or snapshot.session.owner != owner:
        return None, changes
    if message.status == "queued":
        changes.queued[message.id] = {"status": "dropped"}
        changes.events.append(NewEvent(None, "message_deleted", {"queued_message_id": message.id}))
        session = snapshot.session
        others = [q for q in snapshot.queued if q.id != message.id]
        if session.status == "running" and session.current_turn_id is None and not others:
            # The session only waited for this message: it has nothing to do any more.
            changes.session.update({"status": "idle", "phase": None})
    return message, changes


def request_cancel(
    snapshot: SessionSnapshot, owner: str, queued_turn_id: TurnId, now: float
) -> tuple[TurnId | None, Changes]:
    """Cancel the running turn (its driver notices), or, when the caller's message is accepted
    but no turn took it yet, record it as a turn cancelled before it started (`queued_turn_id`)."""
    changes = Changes()
    session = snapshot.session
    if session.owner != owner:
        return None, changes
    if session.current_turn_id is None:
        if session.status != "running" or not snapshot.queued:
            return None, changes
        first = snapshot.queued[0]
        seq = session.turn_count + 1
        changes.new_turn = TurnRecord(
            id=queued_turn_id,
            session_id=session.id,
            seq=seq,
            status="cancelled",
            queued_message_id=first.id,
            started_at=now,
            ended_at=now,
            answer=None,
            error=None,
            model_calls=0,
            input_tokens=0,
            output_tokens=0,
        )
        changes.queued[first.id] = {"status": "consumed", "turn_id": queued_turn_id}
        changes.messages.append(NewMessage(queued_turn_id, "user", user_content(first)))
        changes.session.update({"turn_count": seq, "last_turn_id": queued_turn_id})
        changes.events.append(NewEvent(queued_turn_id, "turn_ended", {"status": "cancelled", "error": None}))
        rest = replace(snapshot, queued=snapshot.queued[1:])
        _settle(rest, changes)
        return queued_turn_id, changes
    turn_id = session.current_turn_id
    # A parked turn (waiting for input or a timer) has no driver: wake it so one cancels it.
    changes.session.update({"cancel_requested_turn": turn_id, "wake_at": None})
    if session.status == "waiting_for_input":
        changes.session["status"] = "running"
    changes.events.append(NewEvent(turn_id, "cancel_requested", {}))
    return turn_id, changes


def request_close(snapshot: SessionSnapshot, owner: str, reason: str) -> Changes:
    """Close at once a session at rest; a working one closes when its turn ends (cancelled)."""
    changes = Changes()
    session = snapshot.session
    if session.owner != owner or session.status == "closed":
        return changes
    _drop_queue(snapshot, changes)
    if session.status not in DRIVEN_SESSION:
        changes.session.update({"status": "closed", "phase": None, "closed_reason": reason})
        changes.events.append(NewEvent(None, "session_closed", {"reason": reason}))
        return changes
    changes.session.update(
        {
            "close_requested": True,
            "closed_reason": reason,
            "cancel_requested_turn": session.current_turn_id,
            "wake_at": None,
        }
    )
    if session.status == "waiting_for_input":
        changes.session["status"] = "running"
    changes.events.append(NewEvent(session.current_turn_id, "close_requested", {"reason": reason}))
    return changes


def user_content(message: QueuedMessageRecord) -> dict[str, Any]:
    """A queued message as the transcript keeps it: its text, and references to its attachments."""
    if message.attachments:
        return {"text": message.text, "attachments": message.attachments}
    return {"text": message.text}
