"""Tool outputs as pydantic models (their JSON schemas are the tools' outputSchema), and the
conversion from runtime records to them. This module and render.py are the only places that
know the wire shape."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema

from parley.config import AgentConfig, Memory
from parley.core.plans import PlanState, plan_of
from parley.core.records import (
    AuditRecord,
    InterruptRecord,
    MessageRecord,
    PendingInterrupt,
    QueuedMessageRecord,
    SessionRecord,
    ToolCallRecord,
    TurnRecord,
)
from parley.core.states import OutcomeStatus
from parley.core.transitions import opens_a_link
from parley.runtime.offer import Offer
from parley.runtime.service import SessionDetails, TurnOutcome
from parley.runtime.session_access import Decider
from parley.runtime.session_labels import format_time

# Tool results in outcomes are cut to this length; get_session shows the transcript in full.
RESULT_PREVIEW_CHARS = 2000

# Any JSON value (a task's result follows the agent's own `result:` schema), said as one branch per
# type: a schema with no keyword at all reads to checkers as "anything, by mistake" (the
# Inspector's --strict warns), and a `type` array is less portable than `anyOf`.
JsonValue = Annotated[
    Any,
    WithJsonSchema(
        {"anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")]}
    ),
]


def iso(ts: float | None) -> str | None:
    return None if ts is None else format_time(ts)


class ToolCallView(BaseModel):
    id: str
    tool: str
    arguments: dict[str, Any]
    status: str
    effect: str
    result: str | None = Field(None, description="The result text (cut to 2000 characters).")
    is_error: bool = False
    requires_approval: bool = False
    server: str | None = Field(None, description="The MCP server of the tool, if it is one.")


class PendingView(BaseModel):
    id: str = Field(description="Pass as interrupt_id to approve or answer_question.")
    kind: Literal["approval", "question", "authorization_required"]
    tool_call_id: str | None = None
    tool: str | None = Field(None, description="Approvals: the tool the agent wants to call.")
    server: str | None = Field(None, description="With connect_url: the MCP server the link is for.")
    host: str | None = Field(None, description="With connect_url: that server's host, or the page's.")
    connect_url: str | None = Field(
        None,
        description=(
            "authorization_required, or a question a server asks by a page to open: parley's link, which "
            "only the session's owner can complete (signed in to parley); never the third party's own URL."
        ),
    )
    arguments: dict[str, Any] | None = None
    effect: str | None = None
    question: str | None = None
    choices: list[str] = Field(default_factory=list)
    allows_free_text: bool = False
    deadline: str | None = Field(
        None, description="After this the interrupt resolves by itself (rejected/unanswered)."
    )
    created_at: str | None = None


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = Field(0, description="Prompt tokens the provider served from its cache.")
    model_calls: int = 0


class PlanView(BaseModel):
    status: Literal["cleared", "draft", "active", "completed"] = Field(
        description=(
            "cleared (no todos), draft (waiting for a person's review: execute_plan approves it), "
            "active (approved, being carried out) or completed (every todo completed)."
        )
    )
    revision: int = Field(description="How many times write_todos wrote the plan; execute_plan names it.")
    todos: list[dict[str, Any]] = Field(default_factory=list)


def plan_view(plan: PlanState | None) -> PlanView | None:
    if plan is None:
        return None
    return PlanView(status=plan.status, revision=plan.revision, todos=plan.todos)


class TurnOutcomeView(BaseModel):
    session_id: str
    turn_id: str | None = Field(None, description="Null while the message still waits behind another turn.")
    status: OutcomeStatus
    answer: str | None = None
    result: JsonValue = Field(None, description="A task session's accepted result.")
    pending: list[PendingView] = Field(
        default_factory=list, description="Approvals and questions to resolve."
    )
    tool_calls: list[ToolCallView] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    session_status: str | None = Field(None, description="The session's status after this call.")
    queued_message_id: str | None = None
    notes: list[str] = Field(default_factory=list, description="E.g. a decision that was already made.")
    agent_version: str | None = Field(
        None, description="The version of the agent's definition the turn runs on (see list_agents)."
    )
    mode: Literal["planning", "executing"] | None = Field(
        None,
        description="planning: read-only, it writes a plan to review; executing: it carries out an approved one.",
    )
    plan: PlanView | None = Field(None, description="The session's plan after the turn (null: it has none).")


class MemoryView(BaseModel):
    mode: Literal["full", "window", "compaction", "none"] = Field(
        description="full, window (the latest `messages`), compaction, or none (each turn alone)."
    )
    messages: int | None = Field(None, description="window: how many of the latest messages.")


def memory_view(memory: Memory) -> MemoryView:
    return MemoryView(mode=memory.mode, messages=memory.messages if memory.mode == "window" else None)


class AgentView(BaseModel):
    name: str
    description: str
    version: str = Field(
        description="The version of this definition: a hash of its content; each turn names the one it ran on."
    )
    version_label: str | None = Field(None, description="The agent file's own version: field, if any.")
    kinds: list[str]
    default_kind: str
    input_schema: dict[str, Any] | None = Field(None, description="JSON Schema of start_session's inputs.")
    result_schema: dict[str, Any] | None = Field(
        None, description="Task sessions: the JSON Schema of the result."
    )
    tools: list[str]
    tools_needing_approval: list[str]
    model: str
    limits: dict[str, int | float | None]
    memory: MemoryView = Field(
        description="What of the conversation the model sees; sessions may choose less."
    )
    notes: list[str] = Field(
        default_factory=list, description="Tool sources that could not be listed, and why."
    )
    plan_mode: bool = Field(
        False,
        description=(
            "Plan mode: a session's first message (start_session) plans unless plan=false; "
            "plan=true on send_message plans too (execute_plan approves the plan)."
        ),
    )


class AgentList(BaseModel):
    agents: list[AgentView]
    models: list[str] = Field(
        default_factory=list, description='Models a session may switch to: settings={"model": ...}.'
    )


class AttachmentView(BaseModel):
    """What a message carried besides its text (the bytes: GET /v1/sessions/{id}/attachments/{sha256})."""

    kind: Literal["image", "audio", "resource", "resource_link"]
    name: str
    mime_type: str | None
    size: int | None = Field(description="Bytes (a resource link: as the link said, if it did).")
    sha256: str | None = Field(
        description="The bytes' hash (none for a resource link: parley keeps no bytes)."
    )
    uri: str | None = Field(None, description="A resource's or a resource link's URI.")


class MessageView(BaseModel):
    seq: int
    role: str
    turn_id: str | None
    text: str
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False
    attachments: list[AttachmentView] = Field(default_factory=list)
    created_at: str | None


class QueuedView(BaseModel):
    id: str
    message: str
    attachments: list[AttachmentView] = Field(default_factory=list)
    created_at: str | None


class DecisionView(BaseModel):
    """One decision on the session's interrupts, or a refused attempt: who made it, and when."""

    at: str | None
    action: str = Field(description="approve, reject, answer or decline.")
    interrupt_id: str | None
    principal: str = Field(description="Who decided: a token's name, or <issuer>#<subject>.")
    client: str | None = Field(None, description="The OAuth client, else the MCP client, it came through.")
    outcome: Literal["ok", "refused"]
    via: str | None = Field(None, description="tool, elicitation, mrtr or task_input; refused: why.")


class TurnView(BaseModel):
    turn_id: str
    seq: int
    status: str
    agent_version: str | None = Field(
        None, description="The version of the agent's definition it ran on (null: from before versions)."
    )
    started_at: str | None
    ended_at: str | None = None


def turn_view(turn: TurnRecord) -> TurnView:
    return TurnView(
        turn_id=turn.id,
        seq=turn.seq,
        status=turn.status,
        agent_version=turn.agent_version,
        started_at=iso(turn.started_at),
        ended_at=iso(turn.ended_at),
    )


class ForkedFrom(BaseModel):
    session_id: str = Field(description="The session this one was forked from.")
    turn: int = Field(
        description="The turn of that session whose end this one starts from (0: before the first)."
    )


def forked_from(session: SessionRecord) -> ForkedFrom | None:
    if session.parent_session_id is None:
        return None
    return ForkedFrom(session_id=session.parent_session_id, turn=session.parent_turn or 0)


class SessionSummary(BaseModel):
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
    last_error: str | None = Field(
        None,
        description="The error of the session's last turn, when it failed (a later turn that ends well clears it).",
    )
    plan_status: Literal["cleared", "draft", "active", "completed"] = Field(
        "cleared", description="A draft waits for a person's review (execute_plan)."
    )
    plan_revision: int = 0
    forked_from: ForkedFrom | None = Field(
        None, description="Set on a fork: the session and turn it was made from."
    )


class SessionView(BaseModel):
    session_id: str
    agent: str
    owner: str = Field(description="The principal the session belongs to.")
    kind: str
    status: str
    title: str | None = Field(
        None, description="Set with update_session, or proposed from the first message."
    )
    tags: list[str] = Field(default_factory=list)
    phase: str | None
    created_at: str | None
    updated_at: str | None
    turn_count: int
    current_turn_id: str | None
    last_turn: TurnOutcomeView | None = None
    pending: list[PendingView] = Field(default_factory=list)
    queued_messages: list[QueuedView] = Field(default_factory=list)
    messages: list[MessageView] = Field(default_factory=list)
    total_messages: int = 0
    todos: list[dict[str, Any]] = Field(default_factory=list)
    plan: PlanView | None = Field(None, description="The plan: its status, revision and todos (null: none).")
    usage: Usage = Field(default_factory=Usage)
    last_error: str | None = None
    closed_reason: str | None = None
    result: JsonValue = Field(None, description="A task session's accepted result.")
    inputs: dict[str, Any] | None = None
    settings: dict[str, Any] = Field(default_factory=dict, description="The settings of the latest turn.")
    decisions: list[DecisionView] = Field(
        default_factory=list, description="Who decided what on this session's interrupts, newest first."
    )
    tools: list[str] = Field(
        default_factory=list,
        description="The tools its agent may call from the next turn on (narrowed by settings.enabled_tools).",
    )
    memory: MemoryView | None = Field(
        None, description="What of the conversation the next turn's model sees."
    )
    turns: list[TurnView] = Field(
        default_factory=list,
        description="The latest turns (up to 50), oldest first, each with the agent version it ran on.",
    )
    forked_from: ForkedFrom | None = Field(
        None, description="Set on a fork: the session and turn it was made from."
    )
    forks: list[SessionSummary] = Field(
        default_factory=list, description="The forks made of this session that you may read (the 20 newest)."
    )
    agent_version_pin: str | None = Field(
        None, description="The agent version every new turn runs on (null: the agent as configured now)."
    )


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    next_cursor: str | None = Field(
        None, description="Pass as cursor to get the next page; null on the last."
    )


class PendingItem(BaseModel):
    session_id: str
    agent: str
    owner: str = Field(description="Whose session it is.")
    interrupt: PendingView
    may_decide: bool | None = Field(
        None,
        description=(
            "Whether you may decide it with approve / answer_question (or /v1): false when only "
            "someone else may (see decided_by)."
        ),
    )
    decided_by: str | None = Field(None, description="Who decides it, when you may not.")


class DraftItem(BaseModel):
    session_id: str
    agent: str
    owner: str = Field(description="Whose session it is.")
    title: str | None = None
    plan: PlanView
    updated_at: str | None = None
    may_decide: bool | None = Field(
        None, description="Whether you may approve it with execute_plan: false when only someone else may."
    )
    decided_by: str | None = Field(None, description="Who approves it, when you may not.")


class PendingList(BaseModel):
    pending: list[PendingItem]
    drafts: list[DraftItem] = Field(
        default_factory=list, description="Draft plans waiting for review (execute_plan approves one)."
    )


class DeleteSessionResult(BaseModel):
    session_id: str
    status: Literal["deleted", "already deleted"]


class CloseResult(BaseModel):
    session_id: str
    status: str
    closed_reason: str | None


def tool_call_view(call: ToolCallRecord) -> ToolCallView:
    result = call.result or {}
    text = result.get("text")
    if isinstance(text, str) and len(text) > RESULT_PREVIEW_CHARS:
        text = text[:RESULT_PREVIEW_CHARS] + "…"
    return ToolCallView(
        id=call.id,
        tool=call.name,
        arguments=call.arguments,
        status=call.status,
        effect=call.effect,
        result=text,
        is_error=bool(result.get("is_error", False)),
        requires_approval=call.requires_approval,
        server=call.server,
    )


def outcome_view(outcome: TurnOutcome) -> TurnOutcomeView:
    return TurnOutcomeView(
        session_id=outcome.session_id,
        turn_id=outcome.turn_id,
        status=outcome.status,
        answer=outcome.answer,
        tool_calls=[tool_call_view(c) for c in outcome.tool_calls],
        usage=Usage(
            input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens,
            cached_tokens=outcome.cached_tokens,
            model_calls=outcome.model_calls,
        ),
        error=outcome.error,
        result=outcome.result,
        session_status=outcome.session_status,
        queued_message_id=outcome.queued_message_id,
        pending=[pending_view(i) for i in outcome.pending],
        notes=list(outcome.notes),
        agent_version=outcome.agent_version,
        mode=outcome.mode,
        plan=plan_view(outcome.plan),
    )


def pending_view(interrupt: InterruptRecord) -> PendingView:
    p = interrupt.payload
    return PendingView(
        id=interrupt.id,
        kind=interrupt.kind,
        tool_call_id=interrupt.tool_call_id,
        tool=p.get("tool"),
        arguments=p.get("arguments"),
        effect=p.get("effect"),
        question=p.get("question"),
        choices=list(p.get("choices") or []),
        allows_free_text=bool(p.get("allows_free_text", False)),
        server=p.get("server") if opens_a_link(interrupt) else None,
        host=p.get("host"),
        connect_url=p.get("connect_url"),
        deadline=iso(interrupt.deadline),
        created_at=iso(interrupt.created_at),
    )


def agent_view(agent: AgentConfig, offer: Offer, version: str) -> AgentView:
    return AgentView(
        name=agent.name,
        description=agent.description,
        version=version,
        version_label=agent.version,
        kinds=list(agent.kinds),
        default_kind=agent.resolved_default_kind,
        input_schema=agent.input_schema,
        result_schema=agent.result_schema if "task" in agent.kinds else None,
        tools=[spec.name for spec in offer.tools],
        tools_needing_approval=[name for name, b in offer.bindings.items() if b.requires_approval],
        notes=list(offer.warnings),
        model=f"{agent.model.provider}:{agent.model.name}",
        limits=agent.limits.model_dump(),
        memory=memory_view(agent.resolved_memory),
        plan_mode=agent.plan_mode,
    )


def message_view(message: MessageRecord) -> MessageView:
    content = message.content
    return MessageView(
        seq=message.seq,
        role=message.role,
        turn_id=message.turn_id,
        text=str(content.get("text", "")),
        tool_calls=list(content.get("tool_calls", [])),
        tool_call_id=content.get("tool_call_id"),
        is_error=bool(content.get("is_error", False)),
        attachments=[AttachmentView.model_validate(a) for a in content.get("attachments") or ()],
        created_at=iso(message.created_at),
    )


def queued_view(message: QueuedMessageRecord) -> QueuedView:
    return QueuedView(
        id=message.id,
        message=message.text,
        attachments=[AttachmentView.model_validate(a) for a in message.attachments or ()],
        created_at=iso(message.created_at),
    )


def session_summary(session: SessionRecord) -> SessionSummary:
    return SessionSummary(
        session_id=session.id,
        agent=session.agent,
        owner=session.owner,
        kind=session.kind,
        status=session.status,
        title=session.title,
        tags=session.tags,
        turn_count=session.turn_count,
        created_at=iso(session.created_at),
        updated_at=iso(session.updated_at),
        closed_reason=session.closed_reason if session.status == "closed" else None,
        last_error=session.last_error,
        plan_status=session.plan_status,
        plan_revision=session.plan_revision,
        forked_from=forked_from(session),
    )


def session_view(snapshot: SessionDetails, last_turn: TurnOutcome | None) -> SessionView:
    s = snapshot.session
    return SessionView(
        pending=[pending_view(i) for i in snapshot.pending],
        session_id=s.id,
        agent=s.agent,
        owner=s.owner,
        kind=s.kind,
        status=s.status,
        title=s.title,
        tags=s.tags,
        phase=s.phase,
        created_at=iso(s.created_at),
        updated_at=iso(s.updated_at),
        turn_count=s.turn_count,
        current_turn_id=s.current_turn_id,
        last_turn=outcome_view(last_turn) if last_turn else None,
        queued_messages=[queued_view(q) for q in snapshot.queued],
        messages=[message_view(m) for m in snapshot.messages],
        total_messages=snapshot.total_messages,
        todos=s.todos,
        plan=plan_view(plan_of(s)),
        usage=Usage(
            input_tokens=s.input_tokens,
            output_tokens=s.output_tokens,
            cached_tokens=s.cached_tokens,
            model_calls=s.model_calls,
        ),
        last_error=s.last_error,
        closed_reason=s.closed_reason if s.status == "closed" else None,
        result=s.result,
        inputs=s.inputs,
        settings=s.settings,
        decisions=[decision_view(e) for e in snapshot.decisions],
        tools=snapshot.tools,
        memory=memory_view(snapshot.memory) if snapshot.memory else None,
        turns=[turn_view(t) for t in snapshot.turns],
        forked_from=forked_from(s),
        forks=[session_summary(f) for f in snapshot.forks],
        agent_version_pin=s.agent_version_pin,
    )


def decision_view(entry: AuditRecord) -> DecisionView:
    return DecisionView(
        at=iso(entry.at),
        action=entry.action,
        interrupt_id=entry.target,
        principal=entry.principal,
        client=entry.client,
        outcome=entry.outcome,
        via=entry.detail.get("via") or entry.detail.get("error"),
    )


def draft_item(session: SessionRecord, decider: Decider | None = None) -> DraftItem:
    return DraftItem(
        session_id=session.id,
        agent=session.agent,
        owner=session.owner,
        title=session.title,
        plan=PlanView(status=session.plan_status, revision=session.plan_revision, todos=session.todos),
        updated_at=iso(session.updated_at),
        may_decide=decider.may_decide if decider is not None else None,
        decided_by=decider.decided_by if decider is not None else None,
    )


def pending_item(found: PendingInterrupt, decider: Decider | None = None) -> PendingItem:
    return PendingItem(
        session_id=found.interrupt.session_id,
        agent=found.agent,
        owner=found.owner,
        interrupt=pending_view(found.interrupt),
        may_decide=decider.may_decide if decider is not None else None,
        decided_by=decider.decided_by if decider is not None else None,
    )
