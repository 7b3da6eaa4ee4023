"""Every status parley stores, and every set of them a rule names: the one place they are written.

The runtime, the server, the storage queries and the client's mirror import these (or are
checked against them, tests/test_states.py). Storage never restates a set in SQL: it renders
the SQL from these (parley/storage/sql/conditions.py). The statuses and what each set means:
docs/design.md#states.
"""

from __future__ import annotations

from typing import Literal, get_args

SessionStatus = Literal["idle", "running", "waiting_for_input", "completed", "failed", "closed"]
TurnStatus = Literal["running", "answered", "completed", "failed", "cancelled"]
ToolCallStatus = Literal[
    "pending",
    "running",
    "pending_approval",
    "awaiting_answer",
    "waiting_for_timer",
    "waiting_for_task",
    "succeeded",
    "failed",
    "rejected",
    "cancelled",
    "outcome_unknown",
]
InterruptStatus = Literal["pending", "approved", "rejected", "answered", "declined", "expired", "cancelled"]
QueuedStatus = Literal["queued", "consumed", "dropped"]
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
# A session's plan (its todos): none, a draft a person has not approved, approved and being
# carried out, or every todo completed (docs/plan-mode.md).
PlanStatus = Literal["cleared", "draft", "active", "completed"]
# What a turn may do with its plan: plan it (read-only tools and write_todos) or carry out an
# approved one (every tool). None: an ordinary turn of a session with no plan to follow.
TurnMode = Literal["planning", "executing"]
# A turn's status as a caller sees it (a tool's outcome): how it ended, or that it waits, still
# runs, or (a session started without a message) that nothing ran yet. The order is the one the
# tools' output schemas publish.
OutcomeStatus = Literal[
    "answered", "completed", "waiting_for_input", "running", "failed", "cancelled", "idle"
]

SESSION_STATUSES: frozenset[str] = frozenset(get_args(SessionStatus))
TURN_STATUSES: frozenset[str] = frozenset(get_args(TurnStatus))
TOOL_CALL_STATUSES: frozenset[str] = frozenset(get_args(ToolCallStatus))
TASK_STATUSES: frozenset[str] = frozenset(get_args(TaskStatus))
PLAN_STATUSES: frozenset[str] = frozenset(get_args(PlanStatus))

# --------------------------------------------------------------------------- sessions

# A session that takes no more messages: closed by a person, or a task session that finished.
ENDED_SESSION: frozenset[SessionStatus] = frozenset({"closed", "completed", "failed"})
# A session no turn is working on: idle, or ended.
SESSION_AT_REST: frozenset[SessionStatus] = ENDED_SESSION | {"idle"}
# Sessions a driver may hold a lease on: running a turn, or parked inside one (waiting for a
# person, a timer or a downstream task).
DRIVEN_SESSION: frozenset[SessionStatus] = frozenset({"running", "waiting_for_input"})
# The status of a session with a turn to run or go on with (a driver must claim it).
RUNNING_SESSION: SessionStatus = "running"
# The status of a session parked inside its turn.
PARKED_SESSION: SessionStatus = "waiting_for_input"
# The phase of a running session parked on a timer or a downstream task: it counts against no
# running-turn limit.
WAITING_PHASE = "waiting"
# Retention's idle age applies to sessions with this status; its ended age to ENDED_SESSION.
IDLE_SESSION: SessionStatus = "idle"

# --------------------------------------------------------------------------- turns

# A turn that has ended, whatever its end.
TURN_ENDED: frozenset[TurnStatus] = frozenset({"answered", "completed", "failed", "cancelled"})
# What a caller sees as "nothing running": an ended turn's status, or an idle session's.
AT_REST: frozenset[str] = TURN_ENDED | {"idle"}

# --------------------------------------------------------------------------- tool calls

# A call whose outcome is decided: it never runs again.
FINAL_TOOL_STATUSES: frozenset[ToolCallStatus] = frozenset(
    {"succeeded", "failed", "cancelled", "outcome_unknown", "rejected"}
)
# A call parked on a person, a timer or a downstream task.
WAITING_CALLS: frozenset[ToolCallStatus] = frozenset(
    {"pending_approval", "awaiting_answer", "waiting_for_timer", "waiting_for_task"}
)
# A call that may run (again).
RUNNABLE_CALLS: frozenset[ToolCallStatus] = frozenset({"pending", "running"})
# A call parked on a time (a timer, or a downstream task's next poll).
TIMED_CALLS: frozenset[ToolCallStatus] = frozenset({"waiting_for_timer", "waiting_for_task"})

# --------------------------------------------------------------------------- MCP tasks

TERMINAL_TASK_STATUSES: frozenset[TaskStatus] = frozenset({"completed", "failed", "cancelled"})

# --------------------------------------------------------------------------- queue and interrupts

# A message waiting for its turn.
QUEUED_MESSAGE: QueuedStatus = "queued"
# An interrupt waiting for its decision.
PENDING_INTERRUPT: InterruptStatus = "pending"
