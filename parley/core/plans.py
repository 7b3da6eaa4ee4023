"""Plan mode's rules: which turns plan and which carry out a plan, what a written plan's status
is, approving a revision, discarding a draft, and what the model is told about the plan. Pure
functions of (snapshot, event), as in transitions.py; docs/plan-mode.md says what users see.

A planning turn explores with read-only tools and writes its plan with write_todos; the plan is
then a `draft` with a revision number. A person approves exactly one revision (execute_plan),
which makes the plan `active` and queues the message of an executing turn, with every tool,
in the same transaction: an approval is applied once, and never lost once acknowledged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from parley.core.changes import Changes, NewEvent, SessionSnapshot
from parley.core.ids import TurnId
from parley.core.records import PlanStatus, QueuedMessageRecord, SessionRecord, TurnMode
from parley.core.states import ENDED_SESSION
from parley.core.transitions import queue_message

# The built-ins a planning turn keeps (besides the tools configured as `read`).
PLANNING_BUILTINS = frozenset({"write_todos", "ask_user"})
# The plans execute_plan may approve: a draft, or an active plan approved again.
APPROVABLE: frozenset[PlanStatus] = frozenset({"draft", "active"})

ApproveOutcome = Literal[
    "approved", "not_found", "closed", "no_plan", "stale", "already_approved", "busy", "turn_limit"
]
DiscardOutcome = Literal["discarded", "not_found", "closed", "no_draft", "busy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanState:
    """A session's plan as callers see it: its status, its revision and its todos."""

    status: PlanStatus
    revision: int
    todos: list[dict[str, Any]]


def plan_of(session: SessionRecord) -> PlanState | None:
    """The session's plan (None: it never had one)."""
    if session.plan_status == "cleared" and session.plan_revision == 0:
        return None
    return PlanState(status=session.plan_status, revision=session.plan_revision, todos=session.todos)


def turn_mode(session: SessionRecord, taken: Sequence[QueuedMessageRecord]) -> TurnMode | None:
    """The mode of the turn that takes these messages: executing when it carries out an approval;
    planning when a message asks for it, or the session is in plan mode (a planning turn ran and
    no plan was approved or discarded since), or a draft waits for review."""
    modes = {message.mode for message in taken}
    if "executing" in modes:
        return "executing"
    if "planning" in modes or session.planning or session.plan_status == "draft":
        return "planning"
    return None


def written_status(todos: Sequence[dict[str, Any]], mode: TurnMode | None) -> PlanStatus:
    """The status of a plan write_todos just wrote in a turn of this mode."""
    if not todos:
        return "cleared"
    if mode == "planning":
        return "draft"
    if all(todo.get("status") == "completed" for todo in todos):
        return "completed"
    return "active"


def plan_written(
    session: SessionRecord,
    turn_id: TurnId,
    mode: TurnMode | None,
    todos: list[dict[str, Any]],
    changes: Changes,
) -> None:
    """write_todos succeeded: the plan is replaced, at the next revision."""
    revision = session.plan_revision + 1
    status = written_status(todos, mode)
    changes.session.update({"todos": todos, "plan_revision": revision, "plan_status": status})
    changes.events.append(
        NewEvent(turn_id, "plan_updated", {"revision": revision, "status": status, "todos": todos})
    )


def approve_plan(
    snapshot: SessionSnapshot,
    owner: str,
    revision: int,
    message: QueuedMessageRecord,
    max_turns: int,
    by: str,
) -> tuple[ApproveOutcome, Changes]:
    """Approve `revision` of the session's plan: only while the session waits for a message, the
    plan is at that revision and a draft (or active), and nothing is queued or pending. The plan
    becomes active and `message` (mode executing) is queued; any refusal changes nothing, and a
    revision approved already is not approved again."""
    session = snapshot.session
    if session.owner != owner:
        return "not_found", Changes()
    if session.status in ENDED_SESSION or session.close_requested:
        return "closed", Changes()
    if revision == session.plan_approved:
        # A repeat (a retry, or a second approval that came later) must not start a second turn.
        return "already_approved", Changes()
    if session.plan_status not in APPROVABLE:
        return "no_plan", Changes()
    if revision != session.plan_revision:
        return "stale", Changes()
    pending = any(i.status == "pending" for i in snapshot.interrupts)
    if session.status != "idle" or session.current_turn_id is not None or snapshot.queued or pending:
        return "busy", Changes()
    outcome, changes = queue_message(snapshot, owner, replace(message, mode="executing"), max_turns)
    if outcome != "queued":
        return ("turn_limit" if outcome == "turn_limit" else "closed"), Changes()
    changes.session.update({"plan_status": "active", "plan_approved": revision, "planning": False})
    changes.events.append(
        NewEvent(
            None, "plan_execution_started", {"revision": revision, "by": by, "queued_message_id": message.id}
        )
    )
    changes.events.append(
        NewEvent(None, "plan_updated", {"revision": revision, "status": "active", "todos": session.todos})
    )
    return "approved", changes


def discard_plan(snapshot: SessionSnapshot, owner: str) -> tuple[DiscardOutcome, Changes]:
    """Drop the draft of a session at rest and leave plan mode: the next message is an ordinary turn."""
    session = snapshot.session
    changes = Changes()
    if session.owner != owner:
        return "not_found", changes
    if session.status in ENDED_SESSION or session.close_requested:
        return "closed", changes
    if session.plan_status != "draft" and not session.planning:
        return "no_draft", changes
    if session.status != "idle" or session.current_turn_id is not None or snapshot.queued:
        return "busy", changes
    changes.session["planning"] = False
    if session.plan_status != "draft":
        return "discarded", changes  # in plan mode with no draft yet: only plan mode ends
    changes.session.update({"todos": [], "plan_status": "cleared"})
    changes.events.append(
        NewEvent(None, "plan_updated", {"revision": session.plan_revision, "status": "cleared", "todos": []})
    )
    return "discarded", changes


def execution_note(revision: int) -> str:
    """The opening message of the turn that carries out an approved plan."""
    return (
        f"Plan revision {revision} is approved. Carry it out now, and keep each todo's status "
        "current with write_todos as you work (in_progress when you start it, completed when done)."
    )


def planning_refusal(name: str) -> str:
    """The result a planning turn's model gets for a tool that may not run there."""
    return (
        f"'{name}' was not run: this is a planning turn, where only write_todos, ask_user and tools "
        "configured as read-only run. Write the plan with write_todos; a person reviews it, and "
        "once it is approved the executing turn may use every tool."
    )


def plan_context(session: SessionRecord, mode: TurnMode | None) -> str:
    """What every model call of a session with a plan is told: the turn's mode and the latest
    plan. Built from the session at each call, so compaction never drops it."""
    lines: list[str] = []
    if mode == "planning":
        lines.append(
            "This is a planning turn. Explore with the read-only tools you are offered, then write "
            "your plan with write_todos (each call replaces the plan). A person reviews the plan "
            "before anything is done, so make no changes now: other tools are refused. If you need "
            "to know more before you can plan, ask."
        )
    elif mode == "executing":
        lines.append(
            f"You are carrying out the plan a person approved (revision {session.plan_revision} or "
            "later). Use the tools you need, and keep each todo's status current with write_todos."
        )
    if session.todos:
        lines.append(f"The session's plan (revision {session.plan_revision}, {session.plan_status}):")
        lines += [f"- [{todo.get('status', 'pending')}] {todo.get('content', '')}" for todo in session.todos]
    return "\n".join(lines)
