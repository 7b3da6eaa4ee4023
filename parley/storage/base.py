"""The Store port: what the runtime persists, shaped by its steps, and the records it reads back.

Every write that belongs to a session's running turn names the lease owner; the store
commits it only while that process still holds the session's lease, otherwise it raises
`LeaseLost` and writes nothing. That is what keeps two processes from committing the
same step.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from parley.ids import QueuedMessageId, SessionId, ToolCallId, TurnId

if TYPE_CHECKING:
    from parley.storage.changes import SessionTransaction

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
InterruptKind = Literal["approval", "question"]
InterruptStatus = Literal["pending", "approved", "rejected", "answered", "declined", "expired", "cancelled"]
ResolveOutcome = Literal["resolved", "already_resolved", "conflict", "not_found", "wrong_kind", "not_pending"]
QueuedStatus = Literal["queued", "consumed", "dropped"]
Role = Literal["user", "assistant", "tool"]

FINAL_TOOL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "outcome_unknown", "rejected"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    id: SessionId
    agent: str
    owner: str
    kind: str
    status: SessionStatus
    phase: str | None
    created_at: float
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
    result: Any = None
    inputs: dict[str, Any] | None = None
    start_client_message_id: str | None = None
    wake_at: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    cached_tokens: int = 0

    @classmethod
    def new(
        cls,
        session_id: SessionId,
        *,
        agent: str,
        owner: str,
        kind: str,
        now: float,
        inputs: dict[str, Any] | None = None,
        start_client_message_id: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> SessionRecord:
        """A session as start_session creates it: idle, no turns, nothing used yet."""
        return cls(
            id=session_id,
            agent=agent,
            owner=owner,
            kind=kind,
            status="idle",
            phase=None,
            created_at=now,
            updated_at=now,
            turn_count=0,
            current_turn_id=None,
            last_turn_id=None,
            last_error=None,
            closed_reason=None,
            input_tokens=0,
            output_tokens=0,
            model_calls=0,
            todos=[],
            cancel_requested_turn=None,
            close_requested=False,
            lease_owner=None,
            lease_expires_at=None,
            inputs=inputs,
            start_client_message_id=start_client_message_id,
            settings=dict(settings or {}),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    id: TurnId
    session_id: SessionId
    seq: int
    status: TurnStatus
    queued_message_id: QueuedMessageId | None
    started_at: float
    ended_at: float | None
    answer: str | None
    error: str | None
    model_calls: int
    input_tokens: int
    output_tokens: int
    result: Any = None
    settings: dict[str, Any] = field(default_factory=dict)
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord:
    session_id: SessionId
    seq: int
    turn_id: TurnId | None
    role: Role
    content: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRecord:
    id: ToolCallId
    session_id: SessionId
    turn_id: TurnId
    step_no: int
    call_index: int
    name: str
    arguments: dict[str, Any]
    status: ToolCallStatus
    effect: str
    result: dict[str, Any] | None
    attempts: int
    idempotency_key: str
    created_at: float
    updated_at: float
    source: str = "builtin"
    server: str | None = None
    tool: str | None = None
    requires_approval: bool = False
    wake_at: float | None = None
    decision: str | None = None
    # Where the call stands at its MCP server: the downstream task it polls, or the input the
    # server asked for and the state to send back with the answers (see runtime/mcp/remote.py).
    remote: dict[str, Any] | None = None

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_TOOL_STATUSES


@dataclass(frozen=True, slots=True, kw_only=True)
class InterruptRecord:
    """A pending approval or question; the turn parks until it is resolved."""

    id: str
    session_id: SessionId
    turn_id: TurnId
    tool_call_id: ToolCallId | None
    kind: InterruptKind
    status: InterruptStatus
    payload: dict[str, Any]
    created_at: float
    deadline: float | None = None
    resolution: dict[str, Any] | None = None
    resolved_by: str | None = None
    resolved_at: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """A decision on an interrupt: an approval's verdict, or a question's answer."""

    approved: bool | None = None
    reason: str | None = None
    answer: str | None = None
    declined: bool = False
    expired: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, False)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveResult:
    outcome: ResolveOutcome
    interrupt: InterruptRecord | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedMessageRecord:
    id: QueuedMessageId
    session_id: SessionId
    seq: int
    text: str
    status: QueuedStatus
    turn_id: TurnId | None
    created_at: float
    client_message_id: str | None = None
    steer: bool = False
    settings: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    session_id: SessionId
    turn_id: TurnId
    step_no: int
    kind: str
    process_id: str
    input_tokens: int
    output_tokens: int
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecord:
    session_id: SessionId
    seq: int
    turn_id: TurnId | None
    kind: str
    data: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class NewToolCall:
    id: ToolCallId
    call_index: int
    name: str
    arguments: dict[str, Any]
    effect: str
    source: str = "builtin"
    server: str | None = None
    tool: str | None = None
    requires_approval: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelStep:
    """One committed model call: the assistant message, the calls it asked for, its usage."""

    turn_id: TurnId
    step_no: int
    assistant: dict[str, Any]
    tool_calls: Sequence[NewToolCall]
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionPage:
    sessions: list[SessionRecord]
    next_cursor: str | None


EnqueueOutcome = Literal["queued", "not_found", "closed", "turn_limit", "duplicate"]

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL_TASK_STATUSES = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """An MCP task: the handle a client holds on the turn its call started (or resumed).

    Its status is derived from the turn while the task is open; `result` is the wire result,
    stored once the task ends so that later reads neither change nor need the turn."""

    id: str
    owner: str
    generation: str
    tool: str
    session_id: SessionId | None
    queued_message_id: QueuedMessageId | None
    turn_id: TurnId | None
    status: TaskStatus
    status_message: str | None
    result: dict[str, Any] | None
    ttl_ms: int | None
    poll_interval_ms: int
    created_at: float
    updated_at: float
    expires_at: float | None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_TASK_STATUSES


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPage:
    tasks: list[TaskRecord]
    next_cursor: str | None


class Store(Protocol):
    """Durable state of every session. All methods are safe to call from many tasks at once."""

    # -- the step port (parley/storage/changes.py): decisions in one transaction each
    def session_transaction(
        self,
        session_id: SessionId,
        *,
        turn_id: TurnId | None = None,
        lease: str | None = None,
        interrupt_id: str | None = None,
        call_id: ToolCallId | None = None,
        message_id: QueuedMessageId | None = None,
        client_message_id: str | None = None,
    ) -> AbstractAsyncContextManager[SessionTransaction | None]: ...

    # -- sessions and queued messages (called by the server on behalf of a caller)
    async def create_session(
        self, session: SessionRecord, first_message: QueuedMessageRecord | None, now: float
    ) -> bool:
        """False (and nothing written) when the owner already used session.start_client_message_id."""
        ...

    async def find_started(self, owner: str, client_message_id: str) -> SessionRecord | None:
        """The session that start_session created with this client_message_id."""
        ...

    async def find_sent(self, session_id: SessionId, client_message_id: str) -> QueuedMessageRecord | None:
        """The message sent to this session with this client_message_id, whatever became of it."""
        ...

    async def first_message(self, session_id: SessionId) -> QueuedMessageRecord | None: ...

    async def latest_event_seq(self, session_id: SessionId) -> int: ...

    async def event_seqs(self, session_ids: Sequence[SessionId]) -> dict[SessionId, int]:
        """The latest event number of each session (a session that changed wrote an event)."""
        ...

    async def steer_pending(self, session_id: SessionId) -> bool: ...

    # -- leases
    async def try_acquire_lease(
        self, session_id: SessionId, owner: str, now: float, ttl_s: float
    ) -> bool: ...

    async def renew_lease(self, session_id: SessionId, owner: str, now: float, ttl_s: float) -> SessionRecord:
        """Extend the lease and return the session as stored. Raises LeaseLost."""
        ...

    async def release_lease(self, session_id: SessionId, owner: str) -> None: ...

    async def count_leases(self, owner: str, now: float) -> int:
        """Sessions whose lease `owner` holds now (for health reports)."""
        ...

    async def sessions_needing_work(self, now: float, limit: int) -> list[SessionId]:
        """Running sessions whose lease is free or expired."""
        ...

    # -- turn steps (lease-checked)
    async def record_event(
        self, session_id: SessionId, turn_id: TurnId | None, kind: str, data: dict[str, Any], now: float
    ) -> None:
        """Append an event that changes no state (a warning, a tool's progress)."""
        ...

    # -- interrupts and timers
    async def list_interrupts(self, session_id: SessionId, pending_only: bool) -> list[InterruptRecord]: ...

    async def list_all_pending(self, limit: int) -> list[InterruptRecord]: ...

    async def save_summary(
        self, session_id: SessionId, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float
    ) -> None:
        """Store a compaction summary of the messages up to `upto_seq` (the transcript stays whole)."""
        ...

    async def latest_summary(self, session_id: SessionId) -> tuple[int, str] | None:
        """(upto_seq, text) of the newest summary."""
        ...

    async def get_session(self, session_id: SessionId) -> SessionRecord | None: ...

    async def list_sessions(
        self, owner: str, status: str | None, agent: str | None, cursor: str | None, limit: int
    ) -> SessionPage: ...

    async def get_turn(self, turn_id: TurnId) -> TurnRecord | None: ...

    async def list_turns(self, session_id: SessionId) -> list[TurnRecord]: ...

    async def list_messages(
        self, session_id: SessionId, from_seq: int | None, limit: int | None
    ) -> list[MessageRecord]: ...

    async def count_messages(self, session_id: SessionId) -> int: ...

    async def list_tool_calls(self, turn_id: TurnId) -> list[ToolCallRecord]: ...

    async def list_queued(self, session_id: SessionId) -> list[QueuedMessageRecord]: ...

    async def get_queued(self, message_id: QueuedMessageId) -> QueuedMessageRecord | None: ...

    async def list_steps(self, session_id: SessionId) -> list[StepRecord]: ...

    async def list_events(self, session_id: SessionId, after_seq: int, limit: int) -> list[EventRecord]: ...

    # -- MCP tasks
    async def create_task(self, task: TaskRecord) -> None: ...

    async def get_task(self, task_id: str, now: float) -> TaskRecord | None:
        """The task, or None when there is none or it has expired."""
        ...

    async def update_task(
        self,
        task_id: str,
        *,
        status: TaskStatus,
        status_message: str | None,
        turn_id: TurnId | None,
        result: dict[str, Any] | None,
        now: float,
    ) -> TaskRecord | None:
        """Record a new state of an open task. An ended task is never changed: the first end
        wins, and the record as stored is returned."""
        ...

    async def list_tasks(self, owner: str, cursor: str | None, limit: int, now: float) -> TaskPage:
        """The owner's live tasks, oldest first, a page at a time."""
        ...

    async def purge_tasks(self, now: float) -> int:
        """Delete expired tasks; return how many."""
        ...
