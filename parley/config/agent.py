"""An agent's definition (the fields of a YAML agent file, or of a Markdown agent's front matter):
its model, tools, limits, kinds, schemas, MCP servers, memory and who may use it; what a session's
settings may change of it; and the built-in demo agent. Reading the files is agent_files.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from parley.config.auth import Members
from parley.config.base import Strict
from parley.config.mcp import ToolPolicy
from parley.config.models import ModelSpec

# The tools parley itself offers an agent (an agent's `tools:` names them).
BUILTIN_TOOLS = ("write_todos", "ask_user", "durable_wait")


class AgentLimits(Strict):
    max_model_calls_per_turn: int = Field(
        8, ge=1, le=1000, description="Model calls one turn may make; the last one is offered no tools."
    )
    max_turns: int = Field(1000, ge=1, le=1_000_000, description="Turns per session before it closes.")
    max_result_nudges: int = Field(
        2, ge=0, le=100, description="Task sessions: reminders to call set_result before the session fails."
    )
    max_session_tokens: int | None = Field(
        None,
        ge=1,
        description="Model tokens (input + output) a session may use; then it closes (task: fails).",
    )
    max_session_seconds: float | None = Field(
        None,
        gt=0,
        description="Wall time in seconds a session may last from its start; then it closes (task: fails).",
    )


# Limits a caller may lower for one session through settings (the agent's values are ceilings).
OVERRIDABLE_LIMITS = ("max_model_calls_per_turn", "max_turns", "max_session_tokens", "max_session_seconds")


def effective_limits(limits: AgentLimits, settings: dict[str, Any]) -> AgentLimits:
    """The agent's limits with a session's overrides applied, never higher than the agent's (a
    session's settings were checked against the definition of then; a turn may run on a newer one)."""
    overrides = {
        k: v if getattr(limits, k) is None else min(v, getattr(limits, k))
        for k, v in (settings.get("limits") or {}).items()
        if k in OVERRIDABLE_LIMITS
    }
    return limits.model_copy(update=overrides) if overrides else limits


def effective_memory(agent: AgentConfig, settings: dict[str, Any]) -> Memory:
    """The agent's memory with a session's settings.memory applied, never wider than the agent's
    (as for limits: the turn may run on a newer definition than the settings were checked against)."""
    own = agent.resolved_memory
    chosen = settings.get("memory")
    if not isinstance(chosen, dict) or chosen.get("mode", own.mode) not in MEMORY_MODES:
        return own
    mode: MemoryMode = chosen.get("mode", own.mode)
    if MEMORY_MODES.index(mode) > MEMORY_MODES.index(own.mode):
        return own
    messages = chosen.get("messages")
    size = messages if isinstance(messages, int) and not isinstance(messages, bool) else own.messages
    return Memory(mode, min(size, own.messages) if own.mode == "window" else size)


SessionKind = Literal["chat", "task"]


class AgentServerRef(Strict):
    server: str = Field(description="Name of a server under mcp_servers in parley.yaml.")
    include: list[str] | None = Field(None, description="Only these tools (the server's names).")
    exclude: list[str] = Field(default_factory=list, description="Never these tools.")
    tools: dict[str, ToolPolicy] = Field(
        default_factory=dict, description="Policies that win over the server's."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"server": value} if isinstance(value, str) else value


class CompactionConfig(Strict):
    """Summarize the older part of a long conversation before a model call would overflow."""

    enabled: bool = Field(False, description="Compaction is off unless turned on.")
    context_window: int | None = Field(
        None, ge=100, description="The model's context window in tokens (default: known models' table)."
    )
    trigger_ratio: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Compact when the prompt exceeds this share of the context window (0-1).",
    )
    retained_ratio: float = Field(
        0.3,
        gt=0,
        lt=1,
        description="Keep roughly this share of the context window as recent messages, verbatim (0-1).",
    )


MemoryMode = Literal["full", "window", "compaction", "none"]
# How much of the past each mode lets the model see: a session may choose a mode that remembers
# no more than its agent's (as its limits are ceilings).
MEMORY_MODES: tuple[MemoryMode, ...] = ("none", "window", "compaction", "full")


class MemoryConfig(Strict):
    """What of the stored transcript (always whole) the model is shown."""

    mode: MemoryMode | None = Field(
        None,
        description=(
            "full: the whole conversation (the default); window: the latest `messages` messages; "
            "compaction: older messages summarized as the context fills (see compaction:); none: each "
            "turn sees only its own messages. Unset: compaction when compaction.enabled, else full."
        ),
    )
    messages: int = Field(
        20,
        ge=1,
        le=100_000,
        description=(
            "window: how many of the latest messages the model sees. The window starts on a user "
            "message (providers refuse a conversation that opens with the assistant, and a call never "
            "comes without its result): fewer when the oldest would be the assistant's or a tool "
            "result; more when the newest exchange alone is longer, which is then shown whole."
        ),
    )


@dataclass(frozen=True, slots=True)
class Memory:
    """The memory a turn runs with: its mode, and the size of a window."""

    mode: MemoryMode
    messages: int


class AgentConfig(Strict):
    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description=(
            "What callers pass as start_session's agent: 1-64 letters, digits, _ . or -, starting with a "
            "letter or digit; unique across the agent files (an agent named demo replaces the built-in one)."
        ),
    )
    description: str = Field("", description="What the agent is for, as list_agents shows it to callers.")
    version: str | None = Field(
        None,
        max_length=64,
        description=(
            "A label of yours for this definition (e.g. 2.1); the version parley stores is a hash of the "
            "whole definition, this label included."
        ),
    )
    instructions: str = Field(
        "", description="The system prompt of every model call (a Markdown agent file: its body)."
    )
    model: ModelSpec = Field(
        default_factory=lambda: ModelSpec(),
        description=(
            "The model its turns run on; or a string, an alias of model_aliases in parley.yaml. Absent, "
            "inherit or an unmapped alias: default_model."
        ),
    )
    tools: list[str] = Field(
        default_factory=list,
        description=f"Built-in tools this agent may call: {', '.join(BUILTIN_TOOLS)} (task sessions also get set_result).",
    )
    limits: AgentLimits = Field(
        default_factory=lambda: AgentLimits(),
        description="Caps of a turn and of a session; a session's settings may lower them, never raise them.",
    )
    kinds: list[SessionKind] = Field(
        default_factory=lambda: list[SessionKind](["chat"]),
        min_length=1,
        description=(
            "The session kinds it runs: chat (a conversation) and task (ends when the agent hands in a "
            "result that matches result:)."
        ),
    )
    default_kind: SessionKind | None = Field(None, description="Kind of a session started without one.")
    input_schema: dict[str, Any] | None = Field(None, description="JSON Schema of start_session's inputs.")
    result: dict[str, Any] | None = Field(None, description="JSON Schema of a task session's result.")
    mcp_servers: list[AgentServerRef] = Field(
        default_factory=list,
        description=(
            "MCP servers whose tools it uses: each the name of one under mcp_servers in parley.yaml (all "
            "its tools), or a mapping that picks its tools and sets their policies."
        ),
    )
    mcp_resources: bool = Field(False, description="Offer tools to list/read resources and get prompts.")
    title_from_model: bool = Field(
        False,
        description="Name a new session with one extra model call on its first message (real models "
        "only; otherwise, and when the call fails, the title is the message's first words).",
    )
    approver: Literal["caller", "human"] = Field(
        "caller",
        description=(
            "caller: the MCP caller may approve and answer with the tools; human: only a person may "
            "(elicitation in the client, the parley CLI)."
        ),
    )
    users: Members | None = Field(
        None,
        description="Who may use the agent (principals or scopes); default: every caller with parley:use.",
    )
    approvers: Members | None = Field(
        None,
        description=(
            "Who counts as a person for its interrupts (principals or scopes): they decide them whoever "
            "owns the session, and nobody else does (besides parley:admin and the CLI)."
        ),
    )
    compaction: CompactionConfig = Field(
        default_factory=lambda: CompactionConfig(),
        description=(
            "How the compaction memory mode summarizes older messages (enabled: true selects that mode)."
        ),
    )
    memory: MemoryConfig = Field(
        default_factory=lambda: MemoryConfig(),
        description="What of the conversation the model sees; a session may choose to remember less.",
    )
    plan_mode: bool = Field(
        False,
        description=(
            "Let callers ask for a planning turn (start_session or send_message with plan: true): "
            "read-only tools and write_todos only, and a draft a person approves with execute_plan "
            "before the agent acts. Needs write_todos in tools. A new session plans its first "
            "message unless start_session says plan: false."
        ),
    )
    plan_tool_choice: Literal["auto", "required"] = Field(
        "auto",
        description=(
            "required: the first model call of a planning turn must call write_todos (where the "
            "model's provider allows a forced tool choice); auto: the model chooses."
        ),
    )
    approval_deadline_s: float | None = Field(
        None,
        gt=0,
        description="An approval not decided within this many seconds is rejected (default: no deadline).",
    )
    question_deadline_s: float | None = Field(
        None,
        gt=0,
        description="A question not answered within this many seconds is unanswered (default: no deadline).",
    )

    @property
    def resolved_default_kind(self) -> SessionKind:
        if self.default_kind is not None:
            return self.default_kind
        return "chat" if "chat" in self.kinds else self.kinds[0]

    @property
    def resolved_memory(self) -> Memory:
        """The agent's memory: `compaction.enabled: true` (older files) means the compaction mode."""
        mode = self.memory.mode or ("compaction" if self.compaction.enabled else "full")
        return Memory(mode, self.memory.messages)

    @property
    def result_schema(self) -> dict[str, Any]:
        return self.result if self.result is not None else {"type": "object"}


DEMO_AGENT = AgentConfig(
    name="demo",
    description=(
        "A keyless, deterministic demo agent. It echoes what you say with the message count, and "
        "follows directives such as '/tool NAME {json}', '/sleep SECONDS', '/ask QUESTION | CHOICE', "
        "'/wait SECONDS' and, in task sessions, '/result {json}' (see the README)."
    ),
    instructions="You are parley's demo agent.",
    model=ModelSpec(provider="demo", name="demo"),
    tools=["write_todos", "ask_user", "durable_wait"],
    kinds=["chat", "task"],
    default_kind="chat",
    result={
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "What the task found or did."}},
        "required": ["summary"],
    },
)
