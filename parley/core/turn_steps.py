"""The engine's rules for a turn's steps: starting a turn, a model step and its answer, a tool's
start and result, interrupts raised by a call, a downstream server's questions and tasks, and
durable timers. Pure functions of (snapshot, event, now) that return the changes to write, as in
parley/core/transitions.py (which holds the rest: messages, decisions, parking, ends). What each
step writes: docs/design.md#transitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from parley.core.changes import Changes, NewEvent, NewMessage, NewStep, SessionSnapshot
from parley.core.effect_policy import start_must_be_durable
from parley.core.ids import ToolCallId, TurnId
from parley.core.plans import plan_written, turn_mode
from parley.core.records import (
    AgentVersionRecord,
    InterruptRecord,
    ModelStep,
    ToolCallRecord,
    ToolCallStatus,
    TurnRecord,
    lease_holder,
)
from parley.core.transitions import TurnEnd, asked_in_place, finish_turn, let_go_if_resting, user_content

# ---------------------------------------------------------------------- a turn's steps


def start_turn(
    snapshot: SessionSnapshot,
    turn_id: TurnId,
    now: float,
    agent_version: AgentVersionRecord | None = None,
    *,
    store_version: bool = False,
) -> tuple[TurnRecord | None, Changes]:
    """A new turn takes the steered messages (all of them), else the oldest queued one. The
    messages' settings apply from this turn on; the turn keeps its own copy, so a restart or a
    later change never alters a turn that has started. It runs on `agent_version` (the agent's
    definition now), which it names, and stores with it unless the store already has it."""
    changes = Changes()
    session = snapshot.session
    if session.close_requested:
        return None, changes
    taken = [q for q in snapshot.queued if q.steer] or list(snapshot.queued[:1])
    if not taken:
        return None, changes
    seq = session.turn_count + 1
    settings = dict(session.settings)
    for message in taken:
        settings.update(message.settings or {})
    turn = TurnRecord(
        id=turn_id,
        session_id=session.id,
        seq=seq,
        status="running",
        queued_message_id=taken[0].id,
        started_at=now,
        ended_at=None,
        answer=None,
        error=None,
        model_calls=0,
        input_tokens=0,
        output_tokens=0,
        settings=settings,
        agent_version=agent_version.version if agent_version is not None else None,
        mode=turn_mode(session, taken),
    )
    changes.new_turn = turn
    if store_version:
        changes.new_agent_version = agent_version
    for message in taken:
        changes.queued[message.id] = {"status": "consumed", "turn_id": turn_id}
        changes.messages.append(NewMessage(turn_id, "user", user_content(message)))
    changes.session.update(
        {
            "status": "running",
            "phase": "model",
            "current_turn_id": turn_id,
            "last_turn_id": turn_id,
            "turn_count": seq,
            "settings": settings,
        }
    )
    if turn.mode == "planning" and not session.planning:
        changes.session["planning"] = True
    started: dict[str, Any] = {"queued_message_id": taken[0].id}
    if turn.mode is not None:
        started["mode"] = turn.mode
    changes.events.append(NewEvent(turn_id, "turn_started", started))
    return turn, changes


def model_step(snapshot: SessionSnapshot, step: ModelStep, lease: str, now: float) -> Changes:
    """A model call's answer, the calls it asked for (pending) and its usage, committed as one step."""
    session, turn = snapshot.session, snapshot.turn
    assert turn is not None and turn.id == step.turn_id, "model_step needs the step's turn in the snapshot"
    changes = Changes()
    changes.new_step = NewStep(
        turn_id=step.turn_id,
        step_no=step.step_no,
        kind="model",
        process_id=lease_holder(lease) or lease,  # the step records which process made it
        input_tokens=step.input_tokens,
        output_tokens=step.output_tokens,
        cached_tokens=step.cached_tokens,
    )
    changes.messages.append(NewMessage(step.turn_id, "assistant", step.assistant))
    settled_events: list[NewEvent] = []
    for new in step.tool_calls:
        settled = new.settled
        changes.new_calls.append(
            ToolCallRecord(
                id=new.id,
                session_id=session.id,
                turn_id=step.turn_id,
                step_no=step.step_no,
                call_index=new.call_index,
                name=new.name,
                arguments=new.arguments,
                status="pending" if settled is None else settled.status,
                effect=new.effect,
                result=None if settled is None else settled.result,
                attempts=0,
                idempotency_key=f"{session.id}/{step.turn_id}/{new.id}",
                created_at=now,
                updated_at=now,
                source=new.source,
                server=new.server,
                tool=new.tool,
                requires_approval=new.requires_approval and settled is None,
            )
        )
        if settled is not None:
            # Settled here, never run: the model reads the result with the other calls' results.
            content = {"tool_call_id": new.id, "name": new.name, "status": settled.status, **settled.result}
            changes.messages.append(NewMessage(step.turn_id, "tool", content))
            data = {"call_id": new.id, "tool": new.name, "status": settled.status, settled.why: True}
            settled_events.append(NewEvent(step.turn_id, "tool_finished", data))
    changes.turn.update(
        {
            "model_calls": turn.model_calls + 1,
            "input_tokens": turn.input_tokens + step.input_tokens,
            "output_tokens": turn.output_tokens + step.output_tokens,
            "cached_tokens": turn.cached_tokens + step.cached_tokens,
        }
    )
    changes.session.update(
        {
            "model_calls": session.model_calls + 1,
            "input_tokens": session.input_tokens + step.input_tokens,
            "output_tokens": session.output_tokens + step.output_tokens,
            "cached_tokens": session.cached_tokens + step.cached_tokens,
            "phase": "tools" if step.tool_calls else "model",
            "wake_at": None,
        }
    )
    if step.streamed_tail:
        changes.events.append(NewEvent(step.turn_id, "text_delta", {"text": step.streamed_tail}))
    changes.events.append(
        NewEvent(
            step.turn_id,
            "model_step",
            {
                "step_no": step.step_no,
                "text": step.assistant.get("text", ""),
                "tool_calls": len(step.tool_calls),
            },
        )
    )
    changes.events.extend(settled_events)
    return changes


def answering_step(
    snapshot: SessionSnapshot, step: ModelStep, lease: str, now: float, end: TurnEnd
) -> tuple[tuple[bool, str | None], Changes]:
    """A model step (model_step) that may end its turn: when it asks for no tool and nothing holds
    its chat turn back (no cancel asked for the turn, no steering message queued), the turn ends
    with it in the same transaction, exactly as finish_turn would end it in the next (and the
    lease is let go when the session rests). That saves a snapshot and a write transaction (with
    `synchronous: full`, its sync) per answered turn. Returns (ended, the status the session rests
    in or None), and the changes."""
    changes = model_step(snapshot, step, lease, now)
    session, turn = snapshot.session, snapshot.turn
    assert turn is not None
    if (
        step.tool_calls
        or session.kind == "task"
        or session.cancel_requested_turn == turn.id
        or any(q.steer for q in snapshot.queued)
    ):
        return (False, None), changes
    # finish_turn reads nothing the step changes (the turn's status, its calls and interrupts,
    # the session's close request and queue), so it decides on the snapshot as loaded.
    finish = finish_turn(snapshot, end, now)
    ended = Changes(
        session={**changes.session, **finish.session},
        turn={**changes.turn, **finish.turn},
        calls=finish.calls,
        interrupts=finish.interrupts,
        queued=finish.queued,
        messages=[*changes.messages, *finish.messages],
        events=[*changes.events, *finish.events],
        new_step=changes.new_step,
    )
    return (True, let_go_if_resting(snapshot, ended)), ended


def nudge(snapshot: SessionSnapshot, text: str) -> Changes:
    """A reminder to the model (a task session that answered without its result)."""
    assert snapshot.turn is not None
    changes = Changes()
    changes.messages.append(NewMessage(snapshot.turn.id, "user", {"text": text, "nudge": True}))
    changes.events.append(NewEvent(snapshot.turn.id, "nudged", {}))
    return changes


def tool_started(snapshot: SessionSnapshot, call_id: ToolCallId) -> Changes:
    changes = Changes()
    call = snapshot.call(call_id)
    if call is None:
        return changes
    changes.calls[call.id] = {"status": "running", "attempts": call.attempts + 1}
    changes.events.append(NewEvent(call.turn_id, "tool_started", {"call_id": call.id, "tool": call.name}))
    changes.durable = start_must_be_durable(call.effect)
    return changes


def tool_result(
    snapshot: SessionSnapshot,
    call_id: ToolCallId,
    status: ToolCallStatus,
    result: dict[str, Any],
    now: float,
    todos: list[dict[str, Any]] | None = None,
) -> Changes | None:
    """A call's final result (None: no such call in the snapshot). A question its server asked
    while it ran is moot once it has ended."""
    call = snapshot.call(call_id)
    if call is None:
        return None
    changes = Changes()
    changes.calls[call.id] = {"status": status, "result": result}
    for interrupt in snapshot.interrupts:
        if interrupt.status == "pending" and interrupt.tool_call_id == call.id:
            changes.interrupts[interrupt.id] = {
                "status": "cancelled",
                "resolved_at": now,
                "resolved_by": "call_ended",
            }
    _unless_waiting(snapshot, changes)
    changes.messages.append(
        NewMessage(
            call.turn_id, "tool", {"tool_call_id": call.id, "name": call.name, "status": status, **result}
        )
    )
    changes.events.append(
        NewEvent(call.turn_id, "tool_finished", {"call_id": call.id, "tool": call.name, "status": status})
    )
    if todos is not None:
        mode = snapshot.turn.mode if snapshot.turn is not None else None
        plan_written(snapshot.session, call.turn_id, mode, todos, changes)
    return changes


def _unless_waiting(snapshot: SessionSnapshot, changes: Changes) -> None:
    """A session shown waiting for input with nothing pending any more (after `changes`) is running."""
    if snapshot.session.status != "waiting_for_input":
        return
    still = [
        i
        for i in snapshot.interrupts
        if i.status == "pending" and changes.interrupts.get(i.id, {}).get("status", "pending") == "pending"
    ]
    if not still and not any(i.status == "pending" for i in changes.new_interrupts):
        changes.session["status"] = "running"


def raise_interrupt(snapshot: SessionSnapshot, interrupt: InterruptRecord, now: float) -> Changes:
    """Ask a person: an approval of a call, or a question (from ask_user or a tool's server)."""
    changes = Changes()
    changes.new_interrupts.append(replace(interrupt, status="pending", created_at=now))
    if asked_in_place(interrupt):
        # The call stays open at its server while the user is asked; the session shows it.
        if snapshot.session.status == "running":
            changes.session.update({"status": "waiting_for_input", "phase": None})
    elif interrupt.tool_call_id is not None:
        status: ToolCallStatus = "pending_approval" if interrupt.kind == "approval" else "awaiting_answer"
        changes.calls[interrupt.tool_call_id] = {"status": status}
    changes.events.append(
        NewEvent(
            interrupt.turn_id, "interrupt_raised", {"interrupt_id": interrupt.id, "kind": interrupt.kind}
        )
    )
    return changes


def drop_questions_in_place(snapshot: SessionSnapshot, now: float) -> tuple[int, Changes]:
    """Questions a server asked during a call that was open in a process that stopped can never
    reach that call: drop them, so the session does not wait for them."""
    changes = Changes()
    for interrupt in snapshot.interrupts:
        if interrupt.status == "pending" and interrupt.kind == "question" and _in_place_mode(interrupt):
            changes.interrupts[interrupt.id] = {
                "status": "cancelled",
                "resolved_at": now,
                "resolved_by": "call_interrupted",
            }
    dropped = len(changes.interrupts)
    if dropped:
        _unless_waiting(snapshot, changes)
        changes.events.append(NewEvent(None, "questions_dropped", {"count": dropped}))
    return dropped, changes


def _in_place_mode(interrupt: InterruptRecord) -> bool:
    downstream = interrupt.payload.get("downstream")
    return isinstance(downstream, dict) and downstream.get("mode") == "in_place"


def ask_remote(
    snapshot: SessionSnapshot,
    call_id: ToolCallId,
    remote: dict[str, Any],
    questions: Sequence[InterruptRecord],
    now: float,
) -> Changes | None:
    """A call's server asked questions before it can go on: the call waits for the answers."""
    if snapshot.call(call_id) is None:
        return None
    changes = Changes()
    changes.calls[call_id] = {"status": "awaiting_answer", "remote": remote, "wake_at": None}
    for question in questions:
        changes.new_interrupts.append(replace(question, status="pending", created_at=now))
        changes.events.append(
            NewEvent(
                question.turn_id, "interrupt_raised", {"interrupt_id": question.id, "kind": question.kind}
            )
        )
    return changes


def wait_remote(
    snapshot: SessionSnapshot,
    call_id: ToolCallId,
    status: ToolCallStatus,
    remote: dict[str, Any],
    wake_at: float | None,
) -> Changes | None:
    """A call that runs as a downstream task waits for its next poll at `wake_at`."""
    call = snapshot.call(call_id)
    if call is None:
        return None
    changes = Changes()
    changes.calls[call.id] = {"status": status, "remote": remote, "wake_at": wake_at}
    data: dict[str, Any] = {"call_id": call.id, "tool": call.name, "status": status, "wake_at": wake_at}
    if remote.get("task_id"):
        data["task_id"] = remote["task_id"]
        data["task_status"] = remote.get("task_status")
    changes.events.append(NewEvent(call.turn_id, "tool_remote", data))
    return changes


def set_timer(call_id: ToolCallId, wake_at: float) -> Changes:
    """A durable wait: the call waits for `wake_at` (a stored timer, it survives restarts)."""
    changes = Changes()
    changes.calls[call_id] = {"status": "waiting_for_timer", "wake_at": wake_at}
    changes.events.append(NewEvent(None, "timer_set", {"call_id": call_id, "wake_at": wake_at}))
    return changes
