"""What parley's tools return, as typed models for the client.

These mirror the server's tool outputs (parley/server/wire.py, published as each tool's
outputSchema) without importing the server: a client should not load the runtime. A fast test
(tests/test_client_contract.py) compares each model with the outputSchema the server publishes, so
the two cannot drift apart. Unknown fields are ignored, so a newer server does not break an
older client.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

# OutcomeStatus and AT_REST mirror parley/core/states.py (the client imports nothing of the
# server's side of parley); tests/test_states.py checks that they are the same.
OutcomeStatus = Literal[
    "answered", "completed", "waiting_for_input", "running", "failed", "cancelled", "idle"
]
# The outcomes after which nothing more happens in the turn by itself.
AT_REST: frozenset[str] = frozenset({"answered", "completed", "failed", "cancelled", "idle"})


# Any JSON value: the schema the server publishes for a task's result (wire.py JsonValue).
JsonValue = Annotated[
    Any,
    WithJsonSchema(
        {"anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")]}
    ),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ToolCall(_Model):
    """One tool call of a turn."""

    id: str
    tool: str
    arguments: dict[str, Any]
    status: str
    effect: str
    result: str | None = None
    is_error: bool = False
    requires_approval: bool = False
    server: str | None = None


class Interrupt(_Model):
    """A pending approval (`kind == "approval"`: `tool`, `arguments`, `effect`), question
    (`kind == "question"`: `question`, `choices`, `allows_free_text`) or authorization
    (`kind == "authorization_required"`: `server`, `host`, `connect_url`)."""

    id: str
    kind: Literal["approval", "question", "authorization_required"]
    tool_call_id: str | None = None
    tool: str | None = None
    # authorization_required: the server, its host, and the connect link the session's owner opens.
    server: str | None = None
    host: str | None = None
    connect_url: str | None = None
    arguments: dict[str, Any] | None = None
    effect: str | None = None
    question: str | None = None
    choices: list[str] = Field(default_factory=list)
    allows_free_text: bool = False
    deadline: str | None = None
    created_at: str | None = None


class Usage(_Model):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_calls: int = 0


PlanStatus = Literal["cleared", "draft", "active", "completed"]


class Plan(_Model):
    """A session's plan (plan mode): `draft` waits for a person's review (Session.execute_plan
    approves this `revision`), `active` is being carried out, `completed` is done, `cleared` has
    no todos."""

    status: PlanStatus
    revision: int
    todos: list[dict[str, Any]] = Field(default_factory=list)


class Outcome(_Model):
    """The outcome of a turn (start_session, send_message, approve, answer_question, cancel_turn,
    execute_plan)."""

    session_id: str
    turn_id: str | None = None
    status: OutcomeStatus
    answer: str | None = None
    result: JsonValue = None
    pending: list[Interrupt] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    session_status: str | None = None
    queued_message_id: str | None = None
    notes: list[str] = Field(default_factory=list)
    agent_version: str | None = None
    # planning: read-only, it wrote a plan to review; executing: it carries out an approved one.
    mode: Literal["planning", "executing"] | None = None
    plan: Plan | None = None

    @property
    def is_at_rest(self) -> bool:
        """Nothing more happens in this turn by itself (it is not running nor waiting for input)."""
        return self.status in AT_REST


class Memory(_Model):
    """What of the conversation the model sees: full, window (the latest `messages`),
    compaction, or none."""

    mode: Literal["full", "window", "compaction", "none"]
    messages: int | None = None


class Agent(_Model):
    name: str
    description: str
    version: str
    version_label: str | None = None
    kinds: list[str]
    default_kind: str
    input_schema: dict[str, Any] | None = None
    result_schema: dict[str, Any] | None = None
    tools: list[str]
    tools_needing_approval: list[str]
    model: str
    limits: dict[str, int | float | None]
    memory: Memory
    notes: list[str] = Field(default_factory=list)
    # A session's first message plans unless start(plan=False); see Session.execute_plan.
    plan_mode: bool = False


class AgentList(_Model):
    agents: list[Agent]
    models: list[str] = Field(default_factory=list)


class Attachment(_Model):
    """What a message carried besides its text; the bytes are at
    GET /v1/sessions/{id}/attachments/{sha256} (none for a resource link)."""

    kind: Literal["image", "audio", "resource", "resource_link"]
    name: str
    mime_type: str | None
    size: int | None
    sha256: str | None
    uri: str | None = None


class Message(_Model):
    seq: int
    role: str
    turn_id: str | None
    text: str
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False
    attachments: list[Attachment] = Field(default_factory=list)
    created_at: str | None


class QueuedMessage(_Model):
    id: str
    message: str
    attachments: list[Attachment] = Field(default_factory=list)
    created_at: str | None


class Decision(_Model):
    """A decision recorded on a session's interrupts (or a refused attempt)."""

    at: str | None
    action: str
    interrupt_id: str | None
    principal: str
    client: str | None = None
    outcome: Literal["ok", "refused"]
    via: str | None = None


class TurnSummary(_Model):
    """A turn of the session, with the version of the agent's definition it ran on."""

    turn_id: str
    seq: int
    status: str
    agent_version: str | None = None
    started_at: str | None
    ended_at: str | None = None


class ForkedFrom(_Model):
    """The session and turn a fork was made from (0: before the first turn)."""

    session_id: str
    turn: int


class SessionState(_Model):
    """A session as get_session reads it."""

    session_id: str
    agent: str
    owner: str
    kind: str
    status: str
    title: str | None = None
    tags: list[str] = Field(default_factory=list)
    phase: str | None
    created_at: str | None
    updated_at: str | None
    turn_count: int
    current_turn_id: str | None
    last_turn: Outcome | None = None
    pending: list[Interrupt] = Field(default_factory=list)
    queued_messages: list[QueuedMessage] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    total_messages: int = 0
    todos: list[dict[str, Any]] = Field(default_factory=list)
    plan: Plan | None = None
    usage: Usage = Field(default_factory=Usage)
    last_error: str | None = None
    closed_reason: str | None = None
    result: JsonValue = None
    inputs: dict[str, Any] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    decisions: list[Decision] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    memory: Memory | None = None
    turns: list[TurnSummary] = Field(default_factory=list)
    forked_from: ForkedFrom | None = None
    forks: list[SessionSummary] = Field(default_factory=list)
    agent_version_pin: str | None = None


class SessionSummary(_Model):
    session_id: str
    agent: str
    owner: str
    kind: str
    status: str
    title: str | None = None
    tags: list[str] = Field(default_factory=list)
    turn_count: int
    created_at: str | None
    updated_at: str | None
    closed_reason: str | None = None
    last_error: str | None = None
    plan_status: PlanStatus = "cleared"
    plan_revision: int = 0
    forked_from: ForkedFrom | None = None


class SessionPage(_Model):
    sessions: list[SessionSummary]
    next_cursor: str | None = None


class PendingItem(_Model):
    session_id: str
    agent: str
    owner: str
    interrupt: Interrupt
    # Whether this caller may decide it with approve / answer_question; if not, who does.
    may_decide: bool | None = None
    decided_by: str | None = None


class DraftItem(_Model):
    """A draft plan waiting for review (Session.execute_plan approves it)."""

    session_id: str
    agent: str
    owner: str
    title: str | None = None
    plan: Plan
    updated_at: str | None = None
    # Whether this caller may approve it; if not, who does.
    may_decide: bool | None = None
    decided_by: str | None = None


class PendingList(_Model):
    pending: list[PendingItem]
    drafts: list[DraftItem] = Field(default_factory=list)


class Closed(_Model):
    session_id: str
    status: str
    closed_reason: str | None


class Deleted(_Model):
    session_id: str
    status: Literal["deleted", "already deleted"]


class QueuedMessageDeleted(_Model):
    session_id: str
    queued_message_id: str
    status: Literal["deleted", "already deleted"]


class ScheduleChange(_Model):
    """What create, pause, resume and delete_schedule say."""

    name: str
    status: Literal["created", "paused", "resumed", "deleted"]


class LastTick(_Model):
    tick_at: str
    status: Literal["started", "skipped", "queued"]
    session_id: str | None


class Schedule(_Model):
    """A schedule as list_schedules shows it."""

    name: str
    source: Literal["config", "database"]
    cron: str | None
    timezone: str
    every_s: float | None
    agent: str
    owner: str
    message: str | None
    inputs: dict[str, Any] | None
    tags: list[str]
    overlap: Literal["skip", "queue", "allow"]
    catch_up: Literal["skip", "once"]
    paused: bool
    created_by: str | None
    last_run: LastTick | None
    next_run: str | None


class ScheduleList(_Model):
    schedules: list[Schedule]


# Which model reads which tool's structured content (the fast test walks this table).
TOOL_OUTPUTS: dict[str, type[BaseModel]] = {
    "list_agents": AgentList,
    "start_session": Outcome,
    "send_message": Outcome,
    "approve": Outcome,
    "answer_question": Outcome,
    "cancel_turn": Outcome,
    "execute_plan": Outcome,
    "discard_plan": SessionSummary,
    "get_session": SessionState,
    "list_sessions": SessionPage,
    "list_pending": PendingList,
    "close_session": Closed,
    "delete_session": Deleted,
    "update_session": SessionSummary,
    "fork_session": SessionSummary,
    "replay_session": SessionSummary,
    "delete_queued_message": QueuedMessageDeleted,
    "create_schedule": ScheduleChange,
    "list_schedules": ScheduleList,
    "pause_schedule": ScheduleChange,
    "resume_schedule": ScheduleChange,
    "delete_schedule": ScheduleChange,
}
