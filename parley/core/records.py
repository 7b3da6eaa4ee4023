"""The records the Store port (storage/ports.py) writes and reads back: sessions, turns,
messages, tool calls, steps, interrupts, events, tasks, the audit trail.

Every write that belongs to a session's running turn names the lease owner; the store
commits it only while that process still holds the session's lease, otherwise it raises
`LeaseLost` and writes nothing. That is what keeps two processes from committing the
same step (docs/design.md#leases-and-the-work-scan).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from parley.core.ids import QueuedMessageId, SessionId, ToolCallId, TurnId, new_queued_message_id

# The statuses and their sets are parley/core/states.py's; they stay importable from here.
from parley.core.states import ENDED_SESSION
from parley.core.states import FINAL_TOOL_STATUSES as FINAL_TOOL_STATUSES
from parley.core.states import TERMINAL_TASK_STATUSES as TERMINAL_TASK_STATUSES
from parley.core.states import InterruptStatus as InterruptStatus
from parley.core.states import PlanStatus as PlanStatus
from parley.core.states import QueuedStatus as QueuedStatus
from parley.core.states import SessionStatus as SessionStatus
from parley.core.states import TaskStatus as TaskStatus
from parley.core.states import ToolCallStatus as ToolCallStatus
from parley.core.states import TurnMode as TurnMode
from parley.core.states import TurnStatus as TurnStatus

# authorization_required: a call waits for its session's owner to connect their account at a
# downstream server (runtime/oauth/); the person's browser resolves it, never a tool's answer.
InterruptKind = Literal["approval", "question", "authorization_required"]
# The answer an authorization_required interrupt is resolved with once the owner connected.
AUTHORIZED = "authorized"
ResolveOutcome = Literal["resolved", "already_resolved", "conflict", "not_found", "wrong_kind", "not_pending"]
Role = Literal["user", "assistant", "tool"]


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
    # How often the lease was taken; the lease token (lease_owner) is `<process>#<epoch>`.
    lease_epoch: int = 0
    # What people call the session and sort it by (update_session; the title is proposed from
    # the first message when none is set). Never written by a turn's steps.
    title: str | None = None
    tags: list[str] = field(default_factory=list)
    # The plan's status and how many times write_todos wrote it (the revision execute_plan names).
    plan_status: PlanStatus = "cleared"
    plan_revision: int = 0
    # The revision execute_plan approved last (0: none): approving it again is refused.
    plan_approved: int = 0
    # In plan mode: from its first planning turn until a plan is approved or discarded, every
    # turn plans (a clarifying question's answer too).
    planning: bool = False
    # The session this one replays (core/replays.py): its calls settle from that one's record.
    replay_of: SessionId | None = None
    # A fork's lineage: the session it was made from and the turn it ends at (fork_session).
    parent_session_id: SessionId | None = None
    parent_turn: int | None = None
    # The agent version every new turn runs on (None: the agent's live definition, as configured now).
    agent_version_pin: str | None = None
    # Whether its calls to downstream servers may carry the owner's own credentials (per-principal
    # headers): not when a schedule someone else made for the owner started it.
    owner_credentials: bool = True

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
        title: str | None = None,
        tags: list[str] | None = None,
        replay_of: SessionId | None = None,
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
            title=title,
            tags=list(tags or []),
            replay_of=replay_of,
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
    # The agent definition the turn runs on (AgentVersionRecord.version); None: a turn stored
    # before versions were kept, which runs on the agent as configured now.
    agent_version: str | None = None
    # Planning (read-only tools and write_todos) or executing an approved plan; None: ordinary.
    mode: TurnMode | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentVersionRecord:
    """One definition of an agent as a turn ran with it, stored by the hash of its content (the
    version), so any process resumes the turn on exactly it, whatever its configuration says now."""

    agent: str
    version: str
    definition: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord:
    session_id: SessionId
    seq: int
    turn_id: TurnId | None
    role: Role
    content: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryRecord:
    """A compaction summary of the transcript up to message `upto_seq`, made during `turn_id`."""

    session_id: SessionId
    upto_seq: int
    turn_id: TurnId | None
    text: str
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
    # What the message carries besides its text: one reference per attachment ({kind, name,
    # mime_type, size, sha256, uri}; see parley/runtime/attachments.py), as JSON.
    attachments: list[dict[str, Any]] | None = None
    # The bytes of those attachments, written with the message in its transaction (stored once
    # by their sha256) and never read back with it: a stored message has none here.
    blobs: tuple[AttachmentBlob, ...] = field(default=(), compare=False, repr=False)
    # The caller's W3C trace context (traceparent, tracestate, baggage), for the turn's spans.
    trace_context: dict[str, str] | None = None
    # The turn it starts plans (plan: true) or executes an approved plan (execute_plan).
    mode: TurnMode | None = None

    @classmethod
    def new(
        cls,
        session_id: SessionId,
        text: str,
        *,
        now: float,
        client_message_id: str | None = None,
        steer: bool = False,
        settings: dict[str, Any] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        blobs: tuple[AttachmentBlob, ...] = (),
        trace_context: dict[str, str] | None = None,
        mode: TurnMode | None = None,
    ) -> QueuedMessageRecord:
        """A message just sent, queued for a turn of `session_id` (the store numbers it)."""
        return cls(
            id=new_queued_message_id(),
            session_id=session_id,
            seq=0,
            text=text,
            status="queued",
            turn_id=None,
            created_at=now,
            client_message_id=client_message_id,
            steer=steer,
            settings=settings,
            attachments=attachments,
            blobs=blobs,
            trace_context=trace_context,
            mode=mode,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachmentBlob:
    """An attachment's bytes, stored once by content hash, whatever the messages that carry it."""

    sha256: str
    mime_type: str
    size: int
    data: bytes


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
    # A call settled as the model asks for it, never run: a planning turn's refusal, or a
    # replay's recorded result. It is stored with this status and result, as final.
    settled: SettledCall | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SettledCall:
    """The final status and result of a call that is not run (see NewToolCall.settled)."""

    status: ToolCallStatus
    result: dict[str, Any]
    # Why, for the event (refused: a planning turn's refusal; replayed: a replay's result).
    why: str = "refused"


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
    # Streamed text not yet published as a text_delta event: it goes out with the step.
    streamed_tail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFilter:
    """What list_sessions narrows to beyond owner, status and agent (None: no condition)."""

    title: str | None = None  # text the title contains, compared case-insensitively
    tag: str | None = None  # a tag the session carries
    created_from: float | None = None  # created at or after
    created_before: float | None = None  # created before


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionPage:
    sessions: list[SessionRecord]
    next_cursor: str | None


EnqueueOutcome = Literal["queued", "not_found", "closed", "turn_limit", "duplicate"]


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


def lease_token(process_id: str, epoch: int) -> str:
    """The fencing token of one holding of a session's lease: the process and the holding's epoch.
    Every write of the holder names it, so a write from an earlier holding is refused."""
    return f"{process_id}#{epoch}"


def lease_holder(token: str | None) -> str | None:
    """The process that holds a lease, from its token."""
    return token.rpartition("#")[0] if token else None


def lease_epoch(token: str | None) -> int | None:
    """The epoch of a holding, from its token: every acquisition, by any process, adds one."""
    epoch = token.rpartition("#")[2] if token else ""
    return int(epoch) if epoch.isdigit() else None


AuditOutcome = Literal["ok", "refused"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """Who did what to which session: a message, a decision, a task, a deletion (or an attempt
    that was refused). Kept apart from the session's own rows, so it outlives the session."""

    id: int  # given by the store (0 before); grows with every entry
    at: float
    principal: str
    client: str | None
    action: str
    outcome: AuditOutcome
    session_id: SessionId | None
    target: str | None  # the interrupt, queued message, turn or task the action was about
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingInterrupt:
    """A pending interrupt with the agent and owner of its session."""

    interrupt: InterruptRecord
    agent: str
    owner: str


DeleteOutcome = Literal["deleted", "busy", "not_found"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DatabaseCounts:
    """Counts over the whole database, for /metrics: sessions by status, messages queued,
    live leases (of any process), and MCP tasks by status."""

    sessions: dict[str, int]
    queued_messages: int
    leases: int
    tasks: dict[str, int]


# The statuses a retention policy's ended-session age removes.
# (ENDED_SESSION, sorted: the SQL rendered from it reads the same in every process.)
ENDED_STATUSES: tuple[SessionStatus, ...] = tuple(sorted(ENDED_SESSION))
# Who a retention sweep's audit entries name, and their action.
RETENTION_PRINCIPAL = "retention"
RETENTION_ACTION = "retention"


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepRule:
    """Which sessions one retention batch removes: those ended (closed, completed, failed) and
    last changed before `ended_before`, and those idle and last changed before `idle_before`
    (None: none of that kind). A session with a live lease is never taken."""

    ended_before: float | None
    idle_before: float | None


def retention_detail(session: SessionRecord) -> dict[str, Any]:
    """What the audit entry of a session removed by retention says about it."""
    return {"owner": session.owner, "agent": session.agent, "status": session.status}
