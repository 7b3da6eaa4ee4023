"""What a caller is shown of a session and its turns: a turn's outcome (TurnOutcome) and a
session's details (SessionDetails), built from what the store holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from parley.config import Memory
from parley.core.changes import SessionSnapshot, SnapshotScope
from parley.core.ids import QueuedMessageId, SessionId, TurnId
from parley.core.plans import PlanState, plan_of
from parley.core.records import (
    AuditRecord,
    InterruptRecord,
    MessageRecord,
    QueuedMessageRecord,
    SessionRecord,
    SessionStatus,
    ToolCallRecord,
    TurnMode,
    TurnRecord,
)
from parley.core.states import OutcomeStatus
from parley.runtime.session_steps import SessionSteps


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnOutcome:
    session_id: SessionId
    turn_id: TurnId | None
    status: OutcomeStatus
    answer: str | None = None
    error: str | None = None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_calls: int = 0
    queued_message_id: QueuedMessageId | None = None
    session_status: SessionStatus | None = None
    result: Any = None
    pending: list[InterruptRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The version of the agent definition the turn runs on (None: stored before versions were kept).
    agent_version: str | None = None
    # The turn's plan mode, and the session's plan after it (None: the session has none).
    mode: TurnMode | None = None
    plan: PlanState | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionDetails:
    session: SessionRecord
    messages: list[MessageRecord]
    total_messages: int
    queued: list[QueuedMessageRecord]
    last_turn: TurnRecord | None
    pending: list[InterruptRecord] = field(default_factory=list)
    # Who decided what (approvals, rejections, answers, declines; refused attempts too), newest first.
    decisions: list[AuditRecord] = field(default_factory=list)
    # The tools its next turn is offered (its agent's, narrowed by settings.enabled_tools).
    tools: list[str] = field(default_factory=list)
    # What of the transcript its next turn's model sees (None: its agent is no longer configured).
    memory: Memory | None = None
    # Its latest turns, oldest first: each names the agent version it ran on.
    turns: list[TurnRecord] = field(default_factory=list)
    # The forks made of it that the caller may read, newest first (the latest FORKS_SHOWN).
    forks: list[SessionRecord] = field(default_factory=list)


async def turn_outcome(
    steps: SessionSteps, turn: TurnRecord, message_id: QueuedMessageId | None = None
) -> TurnOutcome:
    """The outcome of `turn` as it is now (one read: the session, the turn, its calls and interrupts)."""
    snapshot = await steps.look(turn.session_id, turn_view(turn.id))
    if snapshot is None or snapshot.turn is None:
        return TurnOutcome(session_id=turn.session_id, turn_id=turn.id, status=turn.status)
    return outcome(snapshot, snapshot.turn, message_id)


def turn_view(turn_id: TurnId, *, settled: bool = False) -> SnapshotScope:
    """The session with one turn, its calls and its interrupts (not the queue); with `settled`,
    the session alone while it runs that turn still."""
    return SnapshotScope(turn_id=turn_id, queue=False, settled=settled)


def outcome(snapshot: SessionSnapshot, turn: TurnRecord, message_id: QueuedMessageId | None) -> TurnOutcome:
    session = snapshot.session
    status: OutcomeStatus = turn.status
    pending: list[InterruptRecord] = []
    if turn.status == "running" and waits_for_input(session, turn.id):
        status = "waiting_for_input"
        pending = [i for i in snapshot.interrupts if i.status == "pending"]
    return TurnOutcome(
        session_id=turn.session_id,
        turn_id=turn.id,
        status=status,
        pending=pending,
        answer=turn.answer,
        error=turn.error,
        tool_calls=list(snapshot.calls),
        input_tokens=turn.input_tokens,
        output_tokens=turn.output_tokens,
        cached_tokens=turn.cached_tokens,
        model_calls=turn.model_calls,
        queued_message_id=message_id or turn.queued_message_id,
        session_status=session.status,
        result=turn.result,
        agent_version=turn.agent_version,
        mode=turn.mode,
        plan=plan_of(session),
    )


def waits_for_input(session: SessionRecord, turn_id: TurnId) -> bool:
    return session.status == "waiting_for_input" and session.current_turn_id == turn_id
