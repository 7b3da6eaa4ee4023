"""The step port: a session's snapshot, read and written back in one transaction.

The runtime decides (parley/core/transitions.py); a backend only loads the snapshot under its
lock, calls the decision and writes the `Changes` it returned, in the same transaction. A decision made
from an earlier snapshot is never written, which is what keeps first-decision-wins and every
other race atomic. Storage adds nothing to a decision: no status, no text, no rule.
See docs/design.md#the-step-port.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar

from parley.core.ids import QueuedMessageId, ToolCallId, TurnId
from parley.core.records import (
    AgentVersionRecord,
    AuditRecord,
    InterruptRecord,
    InterruptStatus,
    MessageRecord,
    PlanStatus,
    QueuedMessageRecord,
    QueuedStatus,
    Role,
    SessionRecord,
    SessionStatus,
    ToolCallRecord,
    ToolCallStatus,
    TurnRecord,
    TurnStatus,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSnapshot:
    """One session as a decision sees it: the session row, one turn (the current one unless
    another was named) with its tool calls and interrupts, and the messages still queued."""

    session: SessionRecord
    turn: TurnRecord | None
    calls: tuple[ToolCallRecord, ...] = ()
    interrupts: tuple[InterruptRecord, ...] = ()
    queued: tuple[QueuedMessageRecord, ...] = ()
    # Asked for by the caller: one queued message of the session by id, and the message sent
    # with a client_message_id (whatever their status).
    message: QueuedMessageRecord | None = None
    sent: QueuedMessageRecord | None = None
    # Asked for by the scope's `usage`: what its principal has used, read under its lock.
    usage: Usage | None = None
    # Asked for by the scope's `messages_from`: the transcript from that sequence number on.
    messages: tuple[MessageRecord, ...] = ()

    def call(self, call_id: ToolCallId | None) -> ToolCallRecord | None:
        return next((c for c in self.calls if c.id == call_id), None)

    def interrupt(self, interrupt_id: str) -> InterruptRecord | None:
        return next((i for i in self.interrupts if i.id == interrupt_id), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotScope:
    """Which turn a snapshot holds (the session's current one unless another is named, directly
    or as the turn of an interrupt or a call), which queued messages it looks up besides the
    queue (one by id, and the one sent with a client_message_id), and which parts it loads at
    all: a part left out is empty in the snapshot."""

    turn_id: TurnId | None = None
    interrupt_id: str | None = None
    call_id: ToolCallId | None = None
    message_id: QueuedMessageId | None = None
    client_message_id: str | None = None
    # What a decision does not read need not be loaded (each is a query per write): the turn
    # (with its calls and interrupts), and the queue.
    turn: bool = True
    calls: bool = True
    interrupts: bool = True
    queue: bool = True
    # The fair use of a principal, read with the session (parley/runtime/fair_use.py).
    usage: UsageScope | None = None
    # With a named `turn_id`: its turn, calls and interrupts only once the session runs that turn
    # no more (a follower's look; while it runs, the session row alone is read).
    settled: bool = False
    # The transcript's messages from this sequence number on (None: none), for a copy that has
    # the ones before (runtime/leased_transcript.py).
    messages_from: int | None = None


CURRENT_TURN = SnapshotScope()


@dataclass(frozen=True, slots=True)
class Claimed(Generic[T]):
    """A session's lease taken with a decision in the same transaction: the holding's token, what
    the decision returned, and the session as the transaction left it."""

    lease: str
    value: T
    snapshot: SessionSnapshot | None


# ---------------------------------------------------------------------- fair use in the database


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageScope:
    """What a decision reads of one principal's fair use: with `admissions`, what it was admitted
    (sessions started, messages sent) after `since`; with `running`, how many of its sessions run
    a turn. The
    backend reads them under a lock of that principal held until the commit, so two decisions of
    one principal, in any processes, count one after the other."""

    owner: str
    since: float
    admissions: bool = True
    running: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """One principal's fair use as committed: by what is counted, how many admissions since the
    scope's `since` and when the oldest of them was; and its sessions running a turn (0 unless
    the scope asked)."""

    counts: Mapping[str, int]
    oldest: Mapping[str, float]
    running: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    """One admitted act of a principal (`counted`: 'sessions' or 'messages'), stored at the
    decision's `now`; that principal's admissions at or before `forget_before`, of any kind, are
    deleted with it."""

    owner: str
    counted: str
    forget_before: float


@dataclass(frozen=True, slots=True)
class Admit:
    """A fair-use check written with a write that is not a decision (a new session): the usage
    to read, and the rule that returns what to admit or raises (and then nothing is written)."""

    scope: UsageScope
    decide: Callable[[Usage], list[Admission]]


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A transcript entry to append (the backend gives it the session's next sequence number)."""

    turn_id: TurnId | None
    role: Role
    content: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append (the backend gives it the session's next event sequence number)."""

    turn_id: TurnId | None
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class NewStep:
    """The record that a step of a turn was committed; a second commit of the same step fails
    (that is how a process that lost its lease is kept from committing twice)."""

    turn_id: TurnId
    step_no: int
    kind: str
    process_id: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


# The patches a decision writes to existing records: the fields it may change, each with its
# record's type, so a misspelt field or a wrong value is a type error where the decision is made.
# At run time they are plain dicts (a backend maps each field to its column).
# A patch leaves out what makes a record the one it is (its id, what it belongs to, its place)
# and what it was created with; tests/test_changes_typed.py keeps each in step with its record.


class SessionPatch(TypedDict, total=False):
    """Of SessionRecord: all but id, owner, agent, kind, created_at, inputs,
    start_client_message_id, and a fork's lineage and agent version pin."""

    status: SessionStatus
    phase: str | None
    updated_at: float
    turn_count: int
    current_turn_id: TurnId | None
    last_turn_id: TurnId | None
    last_error: str | None
    closed_reason: str | None
    input_tokens: int
    output_tokens: int
    model_calls: int
    todos: list[dict[str, Any]]
    cancel_requested_turn: TurnId | None
    close_requested: bool
    lease_owner: str | None
    lease_expires_at: float | None
    result: Any
    wake_at: float | None
    settings: dict[str, Any]
    cached_tokens: int
    lease_epoch: int
    title: str | None
    tags: list[str]
    plan_status: PlanStatus
    plan_revision: int
    plan_approved: int
    planning: bool


class TurnPatch(TypedDict, total=False):
    """Of TurnRecord: all but id, session_id, seq, queued_message_id, started_at, and the
    settings and agent_version it started on (a started turn keeps them)."""

    status: TurnStatus
    ended_at: float | None
    answer: str | None
    error: str | None
    model_calls: int
    input_tokens: int
    output_tokens: int
    result: Any
    cached_tokens: int


class ToolCallPatch(TypedDict, total=False):
    """Of ToolCallRecord: where the call stands, not which call it is or what it asked for."""

    status: ToolCallStatus
    result: dict[str, Any] | None
    attempts: int
    updated_at: float
    wake_at: float | None
    decision: str | None
    remote: dict[str, Any] | None


class InterruptPatch(TypedDict, total=False):
    """Of InterruptRecord: how it was resolved, not what it asks."""

    status: InterruptStatus
    resolution: dict[str, Any] | None
    resolved_by: str | None
    resolved_at: float | None


class QueuedPatch(TypedDict, total=False):
    """Of QueuedMessageRecord: what became of the message, not what it says."""

    status: QueuedStatus
    turn_id: TurnId | None
    steer: bool


@dataclass(slots=True)
class Changes:
    """What a decision writes, by record field name (the backend maps fields to its columns).

    `session` and `turn` update the snapshot's session and turn; the others update the named
    records of the snapshot; messages and events are appended in order."""

    session: SessionPatch = field(default_factory=SessionPatch)
    turn: TurnPatch = field(default_factory=TurnPatch)
    calls: dict[ToolCallId, ToolCallPatch] = field(default_factory=dict)
    interrupts: dict[str, InterruptPatch] = field(default_factory=dict)
    queued: dict[QueuedMessageId, QueuedPatch] = field(default_factory=dict)
    messages: list[NewMessage] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    # New records (queued messages get the session's next queue number from the backend).
    new_step: NewStep | None = None
    new_turn: TurnRecord | None = None
    new_calls: list[ToolCallRecord] = field(default_factory=list)
    new_interrupts: list[InterruptRecord] = field(default_factory=list)
    new_queued: list[QueuedMessageRecord] = field(default_factory=list)
    # The definition a new turn runs on, stored unless that agent's version is already.
    new_agent_version: AgentVersionRecord | None = None
    # Audit entries of the act this decision is (parley/runtime/audit.py), committed with it.
    audit: list[AuditRecord] = field(default_factory=list)
    # Fair-use admissions of the act, committed with it (see Usage).
    admitted: list[Admission] = field(default_factory=list)
    # The commit must reach the disk before the decision takes effect (whatever the backend's
    # usual durability): set for the start of a call that must never run twice.
    durable: bool = False

    def is_empty(self) -> bool:
        return not (
            self.session
            or self.turn
            or self.calls
            or self.interrupts
            or self.queued
            or self.messages
            or self.events
            or self.new_step
            or self.new_turn
            or self.new_calls
            or self.new_interrupts
            or self.new_queued
            or self.new_agent_version
            or self.audit
            or self.admitted
        )
