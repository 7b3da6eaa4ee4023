"""Server and agent configuration: pydantic models, YAML loading, the built-in demo agent.

This is the only module that reads environment variables (PARLEY_CONFIG, PARLEY_DB, the
data-directory variables, and those a configuration names as ${NAME}); everything else receives
a loaded `ServerConfig`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from parley.config.agent_markdown import (
    AGENT_SUFFIXES,
    BUILTIN_TOOLS,
    E_DEFAULT_MODEL,
    E_FIELD,
    E_YAML,
    ConfigNote,
    markdown_agent_fields,
    not_an_agent,
    read_front_matter,
)
from parley.config.attachments import AttachmentsConfig
from parley.config.auth import (
    MIN_TOKEN_CHARS,
    AuditConfig,
    AuthConfig,
    LimitsConfig,
    Members,
    TokenEntry,
    check_allowed_host,
    check_public_url,
    token_digest,
)
from parley.config.retention import RetentionConfig
from parley.errors import ConfigError, ConfigErrors
from parley.redaction import mask_url

KNOWN_PROVIDERS = ("demo", "anthropic", "openai")

# Stable error codes, so scripts and docs can refer to a problem by name. PARLEY-C001 (the file is
# not valid YAML or not a mapping) and C002 (a field has a wrong type or value, or is unknown) are
# in agent_markdown.py, with the codes of what an agent file asks that parley serves differently
# (C014 to C018); C019 and C020, what a running server's reload logs, are in runtime/agent_reload.py.
E_PROVIDER = "PARLEY-C003"  # unknown model provider
E_TOOL = "PARLEY-C004"  # unknown built-in tool
E_DUPLICATE = "PARLEY-C005"  # two agent files define the same name
E_MISSING = "PARLEY-C006"  # a referenced file or folder does not exist
E_RESULT_SCHEMA = "PARLEY-C007"  # the result schema is not a JSON Schema of an object
E_INPUT_SCHEMA = "PARLEY-C008"  # the input schema is not a valid JSON Schema of an object
E_KIND = "PARLEY-C009"  # default_kind is not among the agent's kinds
E_ENV = "PARLEY-C011"  # a ${NAME} reference names an environment variable that is not set
E_SERVER = "PARLEY-C012"  # an agent names an MCP server that parley.yaml does not configure
E_SERVER_TOOL = "PARLEY-C013"  # a tool named in include/exclude/tools is not listed by its server

_ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    provider: str = Field(
        "demo", description="demo, anthropic, or openai (also any OpenAI-compatible server)."
    )
    name: str = Field("demo", description="The provider's model name.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Request fields passed to the provider (max_tokens, temperature...).",
    )
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable that holds the API key (the key itself is never stored).",
    )
    base_url: str | None = Field(None, description="The provider's API address (OpenAI-compatible servers).")


class AgentLimits(_Strict):
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
        None, gt=0, description="Wall time a session may last from its start; then it closes (task: fails)."
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


Effect = Literal["read", "idempotent_write", "non_idempotent_write", "unclassified"]
ApprovalPolicy = Literal["always", "never", "auto"]


class ToolPolicy(_Strict):
    """Per-tool policy; an unset field falls through to the next source (DESIGN §4.2)."""

    effect: Effect | None = Field(
        None, description="read, idempotent_write, non_idempotent_write or unclassified."
    )
    approval: ApprovalPolicy | None = Field(
        None, description="always, never, or auto (decided by the effect and destructiveness)."
    )


class McpServerConfig(_Strict):
    """An MCP server whose tools agents may use. Only server-side configuration names these."""

    command: str | None = Field(None, description="stdio: the program to start.")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="stdio: extra environment variables.")
    cwd: str | None = None
    url: str | None = Field(None, description="streamable HTTP: the server's MCP endpoint.")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP: extra request headers.")
    trust_annotations: bool = Field(
        True, description="Use the server's tool annotations to classify effects."
    )
    scope: Literal["shared", "per_session"] = Field(
        "shared", description="per_session: each agent session gets its own connection (stateful servers)."
    )
    connect_timeout_s: float = Field(20.0, gt=0, le=600)
    list_timeout_s: float = Field(10.0, gt=0, le=600)
    call_timeout_s: float = Field(60.0, gt=0, le=86_400)
    list_ttl_s: float = Field(300.0, gt=0, le=86_400, description="How long a tool listing is reused.")
    retry_backoff_s: float = Field(5.0, gt=0, le=3600, description="First pause after a failed listing.")
    idle_timeout_s: float = Field(
        300.0, gt=0, le=86_400, description="per_session: close after this idle time."
    )
    max_result_chars: int = Field(20_000, ge=100, le=10_000_000, description="Longer tool results are cut.")
    tools: dict[str, ToolPolicy] = Field(
        default_factory=dict, description="Policies by the server's tool name."
    )
    protocol: Literal["auto", "legacy"] = Field(
        "auto",
        description=(
            "auto: the newest protocol both sides speak (2026-07-28 where offered); legacy: always the "
            "initialize handshake (2025-11-25 and older)."
        ),
    )
    call_as_task: Literal["when_required", "when_offered"] = Field(
        "when_required",
        description=(
            "Call a tool as an MCP task when the server requires it (when_required), or whenever the "
            "server offers it (when_offered)."
        ),
    )
    task_ttl_s: float = Field(
        86_400.0, gt=0, le=30 * 86_400, description="The TTL parley asks for a downstream task."
    )
    task_poll_min_s: float = Field(
        0.5, gt=0, le=3600, description="The shortest pause between two polls of a downstream task."
    )
    task_poll_max_s: float = Field(
        60.0, gt=0, le=86_400, description="Polls back off (x1.5 each time) up to this pause."
    )
    task_poll_failures: int = Field(
        5, ge=1, le=1000, description="Failed polls in a row before a downstream task counts as lost."
    )
    input_wait_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description=(
            "How long a question the server asks waits for the user before parley answers 'cancel' "
            "for them (during the open call, or with the retried call)."
        ),
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either 'command' (a stdio server) or 'url' (a streamable HTTP server), not both"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("'url' must start with http:// or https://")
        if self.task_poll_min_s > self.task_poll_max_s:
            raise ValueError("'task_poll_min_s' must not exceed 'task_poll_max_s'")
        return self


class AgentServerRef(_Strict):
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


class CompactionConfig(_Strict):
    """Summarize the older part of a long conversation before a model call would overflow."""

    enabled: bool = Field(False, description="Compaction is off unless turned on.")
    context_window: int | None = Field(
        None, ge=100, description="The model's context window in tokens (default: known models' table)."
    )
    trigger_ratio: float = Field(0.85, gt=0, le=1, description="Compact when the prompt exceeds this share.")
    retained_ratio: float = Field(
        0.3, gt=0, lt=1, description="Keep roughly this share of recent messages verbatim."
    )


MemoryMode = Literal["full", "window", "compaction", "none"]
# How much of the past each mode lets the model see: a session may choose a mode that remembers
# no more than its agent's (as its limits are ceilings).
MEMORY_MODES: tuple[MemoryMode, ...] = ("none", "window", "compaction", "full")


class MemoryConfig(_Strict):
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


class AgentConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    description: str = ""
    version: str | None = Field(
        None,
        max_length=64,
        description=(
            "A label of yours for this definition (e.g. 2.1); the version parley stores is a hash of the "
            "whole definition, this label included."
        ),
    )
    instructions: str = ""
    model: ModelSpec = Field(default_factory=lambda: ModelSpec())
    tools: list[str] = Field(default_factory=list, description="Built-in tools this agent may call.")
    limits: AgentLimits = Field(default_factory=lambda: AgentLimits())
    kinds: list[SessionKind] = Field(default_factory=lambda: list[SessionKind](["chat"]), min_length=1)
    default_kind: SessionKind | None = Field(None, description="Kind of a session started without one.")
    input_schema: dict[str, Any] | None = Field(None, description="JSON Schema of start_session's inputs.")
    result: dict[str, Any] | None = Field(None, description="JSON Schema of a task session's result.")
    mcp_servers: list[AgentServerRef] = Field(
        default_factory=list, description="MCP servers whose tools it uses."
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
    compaction: CompactionConfig = Field(default_factory=lambda: CompactionConfig())
    memory: MemoryConfig = Field(
        default_factory=lambda: MemoryConfig(),
        description="What of the conversation the model sees; a session may choose to remember less.",
    )
    approval_deadline_s: float | None = Field(
        None, gt=0, description="An approval not decided within this time is rejected (default: no deadline)."
    )
    question_deadline_s: float | None = Field(
        None,
        gt=0,
        description="A question not answered within this time is unanswered (default: no deadline).",
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


class StorageConfig(_Strict):
    path: str | None = Field(None, description="SQLite file; relative paths resolve next to parley.yaml.")
    max_size_mb: float | None = Field(
        None,
        gt=0,
        description=(
            "Largest size the database file may grow to; beyond it writes fail as 'full' (nothing is lost) "
            "until space is freed. Default: no limit but the disk. SQLite only."
        ),
    )
    synchronous: Literal["normal", "full"] = Field(
        "normal",
        description=(
            "How commits reach the disk, on SQLite and PostgreSQL. 'normal': a crash of parley loses "
            "nothing; a power loss (or, on PostgreSQL, a crash of the database server) may lose the last "
            "commits, but never the start of a call that must not run twice (those commits are always "
            "synced before the call is sent). On PostgreSQL that is synchronous_commit off for parley's "
            "connections, except those commits. 'full': every commit is synced (PostgreSQL: as the "
            "server's own synchronous_commit says)."
        ),
    )
    url: str | None = Field(
        None,
        description=(
            "PostgreSQL instead of SQLite: postgresql://user@host:5432/dbname. A password only from the "
            "environment: write ${PGPASSWORD} (any variable) in its place, or leave it out for libpq's "
            "PGPASSWORD / PGPASSFILE."
        ),
    )
    db_schema: str = Field(
        "public",
        alias="schema",
        description="PostgreSQL: the schema that holds parley's tables (created if missing).",
    )
    pool_size: int = Field(
        10, ge=1, le=1000, description="PostgreSQL: connections one process keeps open at most."
    )
    statement_timeout_s: float = Field(
        30.0, gt=0, le=86_400, description="PostgreSQL: a statement running longer is stopped (busy)."
    )
    connect_retry_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description=(
            "PostgreSQL: how long parley keeps trying to reach the database at start, and how long a "
            "call waits for a connection before it fails as unreachable."
        ),
    )
    listen: bool = Field(
        True,
        description=(
            "PostgreSQL: replicas wake each other with LISTEN/NOTIFY when they commit a change; false: "
            "they find each other's changes by polling alone (runtime.poll_interval_s)."
        ),
    )
    listen_url: str | None = Field(
        None,
        description=(
            "PostgreSQL: a direct connection for LISTEN when storage.url goes through a pooler in "
            "transaction mode (PgBouncer), which cannot keep a LISTEN. Default: storage.url. Its "
            "password, like storage.url's, only from the environment."
        ),
    )
    listen_poll_interval_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description=(
            "PostgreSQL, while LISTEN works: how often a waiting call or a driven session still looks "
            "at the database by itself (a safety net), and how long the listening connection may be "
            "silent before it is checked. The work scan keeps runtime.poll_interval_s."
        ),
    )


# What names a database on the command line or in PARLEY_DB: a URL with one of these schemes is
# PostgreSQL; anything else is a SQLite file.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# Fields of `storage:` that mean nothing to the other backend.
_POSTGRES_ONLY = (
    "schema",
    "pool_size",
    "statement_timeout_s",
    "connect_retry_s",
    "listen",
    "listen_url",
    "listen_poll_interval_s",
)
# Fields whose URL may carry a password reference (${NAME}), expanded by expand_database_url.
_URL_FIELDS = ("url", "listen_url")
_SQLITE_ONLY = ("max_size_mb", "synchronous")
_PLAIN_SCHEMA = re.compile(r"(?!pg_)[a-z_][a-z0-9_]{0,62}")
# A URL's parts: the user information (user[:password]) and the rest.
_URL_PARTS = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:(?P<userinfo>[^/?#]*)@)?(?P<rest>.*)$", re.S
)
_PASSWORD_PARAM = re.compile(r"(?:^|[?&])password=(?P<value>[^&#]*)", re.IGNORECASE)
_ONE_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def is_database_url(value: str) -> bool:
    return value.startswith(POSTGRES_SCHEMES)


def clear_text_password(url: str) -> bool:
    """Whether `url` (as written, before ${NAME} is expanded) carries a password other than one
    ${NAME} reference: in its user part or as a `password=` parameter."""
    parts = _URL_PARTS.match(url)
    if parts is None:
        return False
    userinfo = parts.group("userinfo") or ""
    written = [userinfo.partition(":")[2]] if ":" in userinfo else []
    written += [m.group("value") for m in _PASSWORD_PARAM.finditer(parts.group("rest"))]
    return any(value and not _ONE_REFERENCE.fullmatch(value) for value in written)


def expand_database_url(url: str, file: str, where: str) -> str:
    """`url` with ${NAME} replaced from the environment; in the user part (user and password) the
    value is percent-encoded, so a password with @, : or / in it keeps the URL whole.

    Raises:
        ConfigError: a referenced variable is not set.
    """
    parts = _URL_PARTS.match(url)
    if parts is None:
        return str(_expand_env(url, file, where))
    userinfo = parts.group("userinfo")
    rest = str(_expand_env(parts.group("rest"), file, where))
    if userinfo is None:
        return parts.group("scheme") + rest
    encoded = _ENV_REF.sub(lambda m: quote(str(_expand_env(m.group(0), file, where)), safe=""), userinfo)
    return f"{parts.group('scheme')}{encoded}@{rest}"


_CLEAR_TEXT_FIX = (
    "holds a password in clear text; write ${PGPASSWORD} in its place (the password then comes from "
    "that environment variable), or leave it out and set PGPASSWORD or PGPASSFILE for libpq"
)


# The shortest pause between two looks at the agent files (tests look every 0.1 s).
MIN_RELOAD_S = 0.05


class RuntimeConfig(_Strict):
    poll_interval_s: float = Field(
        0.5, gt=0, le=60, description="How often a process looks for work other processes wrote."
    )
    lease_ttl_s: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="How long a crashed process keeps its sessions before others take over.",
    )
    default_wait_s: float = Field(45.0, ge=0, le=3600, description="wait_seconds when a caller gives none.")
    max_wait_s: float = Field(55.0, ge=0, le=3600, description="The largest wait_seconds a call may ask for.")
    max_message_chars: int = Field(100_000, ge=1, le=10_000_000, description="Longest message accepted.")
    shutdown_grace_s: float = Field(
        10.0, ge=0, le=3600, description="On shutdown, how long running steps may take to finish."
    )
    max_model_attempts: int = Field(
        3, ge=1, le=20, description="Attempts of a model call on transient errors."
    )
    model_retry_backoff_s: float = Field(
        1.0, gt=0, le=600, description="Pause before the second attempt of a model call; doubles after."
    )
    max_concurrent_model_calls: int = Field(
        16, ge=1, le=10_000, description="Model calls in flight per process."
    )
    max_concurrent_tool_calls: int = Field(
        32, ge=1, le=10_000, description="Tool calls in flight per process."
    )
    max_driven_sessions: int = Field(
        64,
        ge=1,
        le=100_000,
        description="Sessions one process drives (and leases) at once; others wait unleased.",
    )
    max_timer_s: float = Field(
        7 * 86_400, gt=0, description="The longest durable_wait an agent may ask for (default 7 days)."
    )
    progress_interval_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="While a caller waits, the longest gap between progress notifications.",
    )
    agent_reload_s: float = Field(
        2.0,
        ge=0,
        le=3600,
        description=(
            "How often a running server looks for added, changed and removed agent files (and changes "
            "of agents_dir, model_aliases, default_model in parley.yaml) and reloads them; 0: never."
        ),
    )

    @model_validator(mode="after")
    def _reload_interval(self) -> RuntimeConfig:
        if 0 < self.agent_reload_s < MIN_RELOAD_S:
            raise ValueError(f"runtime.agent_reload_s must be 0 (off) or at least {MIN_RELOAD_S}")
        return self


class TasksConfig(_Strict):
    """MCP tasks (turns a client follows by task id instead of a blocking call)."""

    default_ttl_s: float = Field(
        7 * 86_400,
        gt=0,
        description="How long a task is kept after it was created, when the client asks no TTL.",
    )
    max_ttl_s: float = Field(
        30 * 86_400, gt=0, description="The longest TTL a client may ask for; longer requests are lowered."
    )
    poll_interval_s: float = Field(
        1.0, gt=0, le=3600, description="The polling interval suggested to clients (pollInterval)."
    )
    list_page_size: int = Field(50, ge=1, le=1000, description="Tasks per page of tasks/list.")
    purge_interval_s: float = Field(60.0, gt=0, le=86_400, description="How often expired tasks are deleted.")
    status_poll_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description=(
            "For status notifications: how often parley looks (in one query) for watched tasks that "
            "another process changed (changes made by this process are sent at once)."
        ),
    )
    max_watched: int = Field(
        1000,
        ge=0,
        le=1_000_000,
        description="Tasks per process whose status changes are pushed to their client; more are only polled.",
    )

    @model_validator(mode="after")
    def _ttls(self) -> TasksConfig:
        if self.default_ttl_s > self.max_ttl_s:
            raise ValueError("tasks: default_ttl_s must not exceed max_ttl_s")
        return self


class HttpConfig(_Strict):
    request_state_keys_env: str | None = Field(
        None,
        description=(
            "Environment variable with comma-separated secret keys that seal the state of input-required "
            "rounds, so several parley processes accept each other's retries (default: a key per process)."
        ),
    )
    host: str = Field(
        "127.0.0.1",
        description="Address to bind; a non-loopback one needs auth (tokens or oauth), or --insecure-bind.",
    )
    public_url: str | None = Field(
        None,
        description=(
            "The URL clients use for MCP (e.g. https://parley.example.com/mcp): the audience OAuth tokens "
            "must name (RFC 8707) and the resource of the protected resource metadata; its host is accepted "
            "in Host headers."
        ),
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "Host header values accepted besides loopback (e.g. parley.example.com, or with :port); the "
            "protection against DNS rebinding answers any other with 421."
        ),
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description=(
            "Addresses of reverse proxies whose X-Forwarded-For / X-Forwarded-Proto headers are believed; "
            "from anyone else they are ignored (the default: nobody)."
        ),
    )
    port: int = Field(8765, ge=0, le=65535, description="TCP port (0 picks a free one).")
    max_request_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        le=1024 * 1024 * 1024,
        description=(
            "Largest JSON-RPC message accepted, on both transports: an HTTP request body (larger ones get "
            "413) and one stdio line (larger ones get a -32600 error)."
        ),
    )
    max_sessions: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description=(
            "Open MCP transport sessions. At the cap a new client takes the place of the session idle the "
            "longest; only when every session is busy is it refused (503, retry later)."
        ),
    )
    session_idle_timeout_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="An MCP transport session with no request in flight for this long is closed and forgotten.",
    )
    max_connections: int = Field(
        200,
        ge=1,
        le=100_000,
        description="Open HTTP connections (and requests in flight); over it a request gets 503, retry later.",
    )
    connection_reserve: int | None = Field(
        None,
        ge=0,
        le=100_000,
        description=(
            "Of max_connections, how many only /healthz may use: other requests get 503 once max_connections "
            "minus this many are open, so a load balancer still sees a busy replica alive. Default: a twentieth "
            "of max_connections (10 of 200); less than max_connections."
        ),
    )
    max_connections_per_principal: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Requests one principal may have in flight at once, event streams included; over it 429 with "
            "Retry-After. Default with auth tokens or oauth: a quarter of what max_connections leaves after "
            "the reserve (47 of 200); with auth: none (one local user), no cap."
        ),
    )
    max_streams_per_principal: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Event streams one principal may hold open at once (/v1 event streams, /v1/chat answers, MCP GET "
            "streams); over it 429 with Retry-After. Default with auth tokens or oauth: 16; with auth: none, "
            "no cap."
        ),
    )
    max_connections_per_address: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Connections open from one client address (a trusted proxy's are not counted: behind one, "
            "unauthenticated requests in flight are counted per X-Forwarded-For address instead); over it a "
            "new connection gets 503 and is closed. Default with auth tokens or oauth: as "
            "max_connections_per_principal; with auth: none, no cap."
        ),
    )
    header_read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Time a connection has to send a request's headers, then it is closed.",
    )
    body_read_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="Time a request has to send its whole body, then it gets 408."
    )
    keep_alive_timeout_s: float = Field(
        5.0, gt=0, le=3600, description="An idle keep-alive connection is closed after this long."
    )
    max_header_bytes: int = Field(
        16 * 1024, ge=1024, le=1024 * 1024, description="Largest request line plus headers; larger gets 400."
    )
    stream_heartbeat_s: float = Field(
        15.0,
        ge=0.05,
        le=3600,
        description=(
            "An event stream (/v1/.../events, /v1/chat) that has nothing to send for this long sends a "
            "heartbeat comment, so proxies and clients keep the connection."
        ),
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description=(
            "Origins of web apps that call /v1 from the browser (e.g. https://app.example.com): they get CORS "
            "headers and pass the Origin check. /mcp is never opened to them."
        ),
    )
    chat_agent: str = Field(
        "demo", description="The agent of /v1/chat (the AI SDK chat protocol) when the request names none."
    )
    stream_slow_client_s: float = Field(
        10.0,
        ge=0.05,
        le=3600,
        description=(
            "An event stream whose client takes nothing for this long is cut off with a final event "
            "(it resumes with Last-Event-ID), instead of holding events for it."
        ),
    )

    @model_validator(mode="after")
    def _reserve_below_cap(self) -> HttpConfig:
        if self.connection_reserve is not None and self.connection_reserve >= self.max_connections:
            raise ValueError(
                f"http.connection_reserve ({self.connection_reserve}) must be less than http.max_connections "
                f"({self.max_connections}): the reserve is the part of it only /healthz may use; lower it or raise "
                "http.max_connections"
            )
        return self


class ServerConfigFile(_Strict):
    storage: StorageConfig = Field(default_factory=lambda: StorageConfig())
    agents_dir: str | list[str] = Field(
        "configs/agents",
        description=(
            "Folder (or list of folders) of agent files, relative to parley.yaml: YAML (.yaml, .yml) and "
            "Markdown with front matter (.md, as Claude Code's subagents), e.g. [configs/agents, .claude/agents]."
        ),
    )
    model_aliases: dict[str, ModelSpec] = Field(
        default_factory=dict,
        description=(
            "What an agent's model alias (model: sonnet in a Claude Code file) means. Callers cannot choose "
            "these by name (that is models:); an alias not listed, and inherit, mean default_model."
        ),
    )
    default_model: ModelSpec | None = Field(
        None,
        description="The model of agents that name none, inherit, or an unmapped alias (default: demo).",
    )
    runtime: RuntimeConfig = Field(default_factory=lambda: RuntimeConfig())
    http: HttpConfig = Field(default_factory=lambda: HttpConfig())
    tasks: TasksConfig = Field(default_factory=lambda: TasksConfig())
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    models: dict[str, ModelSpec] = Field(
        default_factory=dict, description="Models a caller may choose by name in session settings."
    )
    auth: AuthConfig = Field(default_factory=lambda: AuthConfig(), description="Who callers are (over HTTP).")
    limits: LimitsConfig = Field(
        default_factory=lambda: LimitsConfig(), description="Fair use per principal."
    )
    audit: AuditConfig = Field(default_factory=lambda: AuditConfig(), description="The audit trail.")
    attachments: AttachmentsConfig = Field(
        default_factory=lambda: AttachmentsConfig(),
        description="What a message may carry besides its text: sizes, count and media types.",
    )
    retention: RetentionConfig = Field(
        default_factory=lambda: RetentionConfig(), description="How long sessions and events are kept."
    )

    @model_validator(mode="after")
    def _server_names(self) -> ServerConfigFile:
        for name in self.mcp_servers:
            if not _SERVER_NAME.fullmatch(name):
                raise ValueError(f"mcp_servers: '{name}' must be letters, digits, _ or - (at most 32)")
        return self


_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """The loaded configuration: where the database is, which agents exist, runtime timings.

    The database is a SQLite file (`db_path`) or a PostgreSQL URL (`db_url`, with its password
    if the environment gave one: never log it, log `db_label`); exactly one of them is set."""

    db_path: Path | None
    agents: dict[str, AgentConfig]
    runtime: RuntimeConfig
    storage: StorageConfig = field(default_factory=StorageConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    models: dict[str, ModelSpec] = field(default_factory=dict)
    config_path: Path | None = None
    agent_files: dict[str, Path] = field(default_factory=dict)
    db_url: str | None = None
    auth: AuthConfig = field(default_factory=AuthConfig)
    # auth.tokens as the server holds them: names, scopes and SHA-256 digests, never a token.
    tokens: tuple[TokenEntry, ...] = ()
    # Why some of auth.tokens cannot be used (an unset token_env...): fatal to `serve --http` only.
    token_problems: tuple[ConfigError, ...] = ()
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    attachments: AttachmentsConfig = field(default_factory=AttachmentsConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    # What agent files ask that parley serves differently (skipped tools, the default model...).
    agent_notices: tuple[ConfigError, ...] = ()

    @property
    def db_label(self) -> str:
        """The database as messages and logs name it: the file, or the URL without its password."""
        if self.db_url is not None:
            return f"{mask_url(self.db_url)} (schema {self.storage.db_schema})"
        return str(self.db_path)


def default_data_dir() -> Path:
    """The per-user data folder for the default database."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "parley"
    if os.name == "nt":
        return Path(os.environ.get("APPDATA", str(Path.home()))) / "parley"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "parley"


def _field_errors(file: str, exc: ValidationError) -> list[ConfigError]:
    errors = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        errors.append(ConfigError(E_FIELD, file, loc, msg))
    return errors


def _read_yaml(path: Path) -> dict[str, Any]:
    expanded: dict[str, Any] = _expand_env(_read_raw_yaml(path), str(path), "")
    return expanded


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(E_MISSING, str(path), "(file)", f"cannot be read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(E_YAML, str(path), "(file)", f"is not UTF-8 text ({exc.reason})") from exc


def _read_raw_yaml(path: Path) -> dict[str, Any]:
    """The file's mapping, ${NAME} references as written."""
    try:
        data = yaml.safe_load(_read_text(path))
    except yaml.YAMLError as exc:
        raise ConfigError(E_YAML, str(path), "(file)", f"is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(E_YAML, str(path), "(top level)", "must be a mapping of fields (key: value)")
    return data


def _read_server_yaml(path: Path) -> dict[str, Any]:
    """parley.yaml with ${NAME} expanded, storage.url by its own rule (expand_database_url), after
    checking that it holds no password in clear text."""
    raw = _read_raw_yaml(path)
    storage = raw.get("storage")
    urls = {
        name: value
        for name in _URL_FIELDS
        if isinstance(storage, dict) and isinstance(value := storage.get(name), str)
    }
    if not urls:
        return dict(_expand_env(raw, str(path), ""))
    assert isinstance(storage, dict)
    for name, url in urls.items():
        if clear_text_password(url):
            raise ConfigError(E_FIELD, str(path), f"storage.{name}", _CLEAR_TEXT_FIX)
    others = {**raw, "storage": {k: v for k, v in storage.items() if k not in urls}}
    expanded: dict[str, Any] = _expand_env(others, str(path), "")
    for name, url in urls.items():
        expanded["storage"][name] = expand_database_url(url, str(path), f"storage.{name}")
    return expanded


def _expand_env(value: Any, file: str, where: str) -> Any:
    """Replace ${NAME} in every string with the environment variable's value ($$ is a literal $)."""
    if isinstance(value, dict):
        return {k: _expand_env(v, file, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, file, f"{where}.{i}") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        if name not in os.environ:
            raise ConfigError(
                E_ENV,
                file,
                where or "(value)",
                f"environment variable {name} is not set; set it or remove ${{{name}}}",
            )
        return os.environ[name]

    return _ENV_REF.sub(substitute, value)


def validate_agent(agent: AgentConfig, file: str) -> list[ConfigError]:
    problems = []
    if agent.model.provider not in KNOWN_PROVIDERS:
        problems.append(
            ConfigError(
                E_PROVIDER,
                file,
                "model.provider",
                f"unknown provider '{agent.model.provider}'; use one of: {', '.join(KNOWN_PROVIDERS)}",
            )
        )
    if agent.model.provider == "anthropic" and not agent.model.api_key_env:
        problems.append(
            ConfigError(
                E_FIELD, file, "model.api_key_env", "anthropic needs the name of the variable holding the key"
            )
        )
    if agent.model.base_url is not None and not agent.model.base_url.startswith(("http://", "https://")):
        problems.append(ConfigError(E_FIELD, file, "model.base_url", "must start with http:// or https://"))
    if agent.memory.mode not in (None, "compaction") and agent.compaction.enabled:
        problems.append(
            ConfigError(
                E_FIELD,
                file,
                "memory.mode",
                f"is {agent.memory.mode}, but compaction.enabled: true means the compaction mode; "
                "remove one of them",
            )
        )
    problems += _schema_problems(agent.result, file, "result", E_RESULT_SCHEMA)
    problems += _schema_problems(agent.input_schema, file, "input_schema", E_INPUT_SCHEMA)
    if agent.default_kind is not None and agent.default_kind not in agent.kinds:
        problems.append(
            ConfigError(
                E_KIND,
                file,
                "default_kind",
                f"'{agent.default_kind}' is not one of the agent's kinds ({', '.join(agent.kinds)}); "
                "add it to kinds or change default_kind",
            )
        )
    for i, tool in enumerate(agent.tools):
        if tool not in BUILTIN_TOOLS:
            problems.append(
                ConfigError(
                    E_TOOL,
                    file,
                    f"tools.{i}",
                    f"unknown built-in tool '{tool}'; known: {', '.join(BUILTIN_TOOLS)}",
                )
            )
    return problems


def _schema_problems(schema: dict[str, Any] | None, file: str, field: str, code: str) -> list[ConfigError]:
    if schema is None:
        return []
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        return [ConfigError(code, file, field, f"is not a valid JSON Schema at {where}: {exc.message}")]
    if schema.get("type") != "object":
        return [
            ConfigError(
                code,
                file,
                field,
                'must describe an object: set "type: object" and list its fields under "properties"',
            )
        ]
    return []


def _server_ref_problems(
    agent: AgentConfig, file: str, servers: dict[str, McpServerConfig]
) -> list[ConfigError]:
    problems = []
    for i, ref in enumerate(agent.mcp_servers):
        if ref.server not in servers:
            known = ", ".join(sorted(servers)) or "none are configured"
            problems.append(
                ConfigError(
                    E_SERVER,
                    file,
                    f"mcp_servers.{i}.server",
                    f"no MCP server '{ref.server}' in parley.yaml (mcp_servers: {known}); add it there or fix the name",
                )
            )
    return problems


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentContext:
    """What reading an agent file needs from parley.yaml: its MCP servers (tools name them) and
    what a model alias means."""

    servers: dict[str, McpServerConfig]
    aliases: dict[str, ModelSpec]
    default_model: ModelSpec

    @classmethod
    def of(cls, file_cfg: ServerConfigFile) -> AgentContext:
        return cls(
            servers=file_cfg.mcp_servers,
            aliases=file_cfg.model_aliases,
            default_model=file_cfg.default_model or ModelSpec(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentFileLoad:
    """One agent file as read: the agent (None when it could not be built), the problems that keep
    it from being served as it is, and notices of what is served differently than written."""

    path: Path
    agent: AgentConfig | None
    problems: list[ConfigError] = field(default_factory=list)
    notices: list[ConfigError] = field(default_factory=list)

    @property
    def is_valid(self) -> bool:
        return self.agent is not None and not self.problems


def load_agent_file(path: Path, context: AgentContext) -> AgentFileLoad:
    """Read one agent file: YAML, or Markdown with front matter (see agent_markdown.py)."""
    file = str(path)
    try:
        if path.suffix == ".md":
            found = read_front_matter(path, _read_text(path))
            if found is None:
                return AgentFileLoad(path=path, agent=None, notices=[not_an_agent(path)])
            front, body = found
            expanded: dict[str, Any] = _expand_env(front, file, "")
            data, notices = markdown_agent_fields(expanded, body, file, context.servers)
        else:
            data, notices = _read_yaml(path), []
        notices += _resolve_model(data, file, context, markdown=path.suffix == ".md")
    except ConfigError as exc:
        return AgentFileLoad(path=path, agent=None, problems=[exc])
    try:
        agent = AgentConfig.model_validate(data)
    except ValidationError as exc:
        return AgentFileLoad(path=path, agent=None, problems=_field_errors(file, exc), notices=notices)
    problems = validate_agent(agent, file) + _server_ref_problems(agent, file, context.servers)
    return AgentFileLoad(path=path, agent=agent, problems=problems, notices=notices)


def _resolve_model(
    data: dict[str, Any], file: str, context: AgentContext, *, markdown: bool
) -> list[ConfigError]:
    """Turn a model alias into its spec (model_aliases), or the server's default model for an agent
    that names none, `inherit`, or an alias parley.yaml does not map. A mapping stays as written."""
    value = data.get("model")
    if value is not None and not isinstance(value, str):
        return []
    default = context.default_model
    runs_on = f"the agent runs on the server's default model {default.provider}:{default.name}"
    alias = value.strip() if value is not None else None
    if alias is not None and alias in context.aliases:
        data["model"] = context.aliases[alias]
        return []
    data["model"] = default
    if alias is None:
        # Claude Code's default is `inherit`; a YAML agent without a model has always run on the default.
        return [ConfigNote(E_DEFAULT_MODEL, file, "model", f"is not given: {runs_on}")] if markdown else []
    if alias == "inherit":
        return [ConfigNote(E_DEFAULT_MODEL, file, "model", f"inherit: {runs_on}")]
    return [
        ConfigError(
            E_DEFAULT_MODEL,
            file,
            "model",
            f"'{alias}' is not in model_aliases of parley.yaml, so {runs_on}; map it there "
            f"(model_aliases: {{{alias}: {{provider: ..., name: ...}}}})",
        )
    ]


def agent_folders(file_cfg: ServerConfigFile, base_dir: Path) -> list[tuple[str, Path]]:
    """The agents_dir folders, each with the field that names it (agents_dir, agents_dir.1...)."""
    if isinstance(file_cfg.agents_dir, str):
        return [("agents_dir", base_dir / file_cfg.agents_dir)]
    return [(f"agents_dir.{i}", base_dir / folder) for i, folder in enumerate(file_cfg.agents_dir)]


def agent_paths(folder: Path) -> list[Path]:
    """The agent files of one folder, in name order (hidden files left out)."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix in AGENT_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


def load_agent_files(
    file_cfg: ServerConfigFile, base_dir: Path, config_file: str, context: AgentContext | None = None
) -> tuple[list[AgentFileLoad], list[ConfigError]]:
    """Every agent file of the agents_dir folders, and the folders that do not exist (an error only
    when agents_dir is written out: the default folder may be absent). `context`: what the files
    are checked against, by default what `file_cfg` configures."""
    context = context or AgentContext.of(file_cfg)
    loads: list[AgentFileLoad] = []
    errors: list[ConfigError] = []
    for where, folder in agent_folders(file_cfg, base_dir):
        if folder.is_dir():
            loads += [load_agent_file(path, context) for path in agent_paths(folder)]
        elif "agents_dir" in file_cfg.model_fields_set:
            errors.append(ConfigError(E_MISSING, config_file, where, f"folder {folder} does not exist"))
    return loads, errors


def combine_agent_files(
    loads: list[AgentFileLoad],
) -> tuple[dict[str, AgentConfig], dict[str, Path], list[ConfigError]]:
    """The agents (the built-in demo unless a file defines its name), the file of each, and the
    problems, a name defined twice among them."""
    agents: dict[str, AgentConfig] = {DEMO_AGENT.name: DEMO_AGENT}
    files: dict[str, Path] = {}
    errors: list[ConfigError] = []
    for load in loads:
        errors.extend(load.problems)
        if load.agent is None:
            continue
        name = load.agent.name
        if name in files:
            errors.append(
                ConfigError(
                    E_DUPLICATE,
                    str(load.path),
                    "name",
                    f"agent '{name}' is already defined in {files[name]}; rename one of them",
                )
            )
            continue
        agents[name] = load.agent  # a file overrides the built-in agent of the same name
        files[name] = load.path
    return agents, files, errors


def load_config(config_path: Path | None, db_override: Path | str | None) -> ServerConfig:
    """Load parley.yaml (or the embedded defaults) plus every agent file. `db_override` (from
    --db or PARLEY_DB, see db_override_from_env) wins over storage.path and storage.url: a
    PostgreSQL URL as a str, a SQLite file as a Path.

    Raises:
        ConfigErrors: every problem found.
    """
    config, errors = _load(config_path, db_override)
    if errors or config is None:
        raise ConfigErrors(errors)
    return config


def collect_config_errors(config_path: Path | None) -> list[ConfigError]:
    config, errors = _load(config_path, None)
    return errors + (list(config.token_problems) if config is not None else [])


def read_server_file(config_path: Path) -> tuple[ServerConfigFile | None, list[ConfigError]]:
    """parley.yaml as its fields say (None, and why, when it cannot be read or a field is wrong)."""
    try:
        return ServerConfigFile.model_validate(_read_server_yaml(config_path)), []
    except ConfigError as exc:
        return None, [exc]
    except ValidationError as exc:
        return None, _field_errors(str(config_path), exc)


def _load(
    config_path: Path | None, db_override: Path | str | None
) -> tuple[ServerConfig | None, list[ConfigError]]:
    errors: list[ConfigError] = []
    file_cfg = ServerConfigFile()
    base_dir = Path.cwd()
    if config_path is not None:
        base_dir = config_path.resolve().parent
        read, problems = read_server_file(config_path)
        if read is None:
            return None, problems
        file_cfg = read
        errors.extend(_storage_problems(file_cfg.storage, str(config_path)))
        errors.extend(_http_problems(file_cfg, str(config_path)))
    # Only serving HTTP needs the tokens: the other commands (the CLI's pending, approve, audit...)
    # work without their environment variables; `parley check` reports them.
    tokens, token_errors = _resolve_tokens(file_cfg.auth, str(config_path or "(defaults)"))

    agents: dict[str, AgentConfig] = {DEMO_AGENT.name: DEMO_AGENT}
    agent_files: dict[str, Path] = {}
    notices: list[ConfigError] = []
    if config_path is not None:
        loads, missing = load_agent_files(file_cfg, base_dir, str(config_path))
        agents, agent_files, problems = combine_agent_files(loads)
        errors += missing + problems
        notices = [n for load in loads for n in load.notices]

    db_path: Path | None = None
    db_url: str | None = None
    if isinstance(db_override, str):
        db_url = db_override
    elif db_override is not None:
        db_path = db_override
    elif file_cfg.storage.url is not None:
        db_url = file_cfg.storage.url
    elif file_cfg.storage.path is not None:
        db_path = base_dir / file_cfg.storage.path
    else:
        db_path = default_data_dir() / "parley.db"
    config = ServerConfig(
        db_path=db_path,
        db_url=db_url,
        agents=agents,
        runtime=file_cfg.runtime,
        storage=file_cfg.storage,
        http=file_cfg.http,
        tasks=file_cfg.tasks,
        mcp_servers=file_cfg.mcp_servers,
        models=file_cfg.models,
        config_path=config_path,
        agent_files=agent_files,
        auth=file_cfg.auth,
        tokens=tokens,
        token_problems=tuple(token_errors),
        limits=file_cfg.limits,
        audit=file_cfg.audit,
        attachments=file_cfg.attachments,
        retention=file_cfg.retention,
        agent_notices=tuple(notices),
    )
    return config, errors


def _resolve_tokens(auth: AuthConfig, file: str) -> tuple[tuple[TokenEntry, ...], list[ConfigError]]:
    """auth.tokens with each token_env read and hashed at once (the token is not kept)."""
    entries: list[TokenEntry] = []
    errors: list[ConfigError] = []
    for i, token in enumerate(auth.tokens):
        where = f"auth.tokens.{i}.token_env"
        if token.sha256 is not None:
            digest = token.sha256
        else:
            value = os.environ.get(token.token_env or "")
            if not value:
                errors.append(
                    ConfigError(
                        E_ENV,
                        file,
                        where,
                        f"environment variable {token.token_env} is not set (or empty); set it to the token, "
                        "or use sha256 instead",
                    )
                )
                continue
            if len(value.strip()) < MIN_TOKEN_CHARS or value != value.strip():
                errors.append(
                    ConfigError(
                        E_FIELD,
                        file,
                        where,
                        f"the token in {token.token_env} is shorter than {MIN_TOKEN_CHARS} characters or has "
                        "spaces around it; make one with 'parley token new'",
                    )
                )
                continue
            digest = token_digest(value)
        entries.append(
            TokenEntry(name=token.name, scopes=frozenset(token.scopes), digest=bytes.fromhex(digest))
        )
    digests = [e.digest for e in entries]
    if len(set(digests)) != len(digests):
        errors.append(
            ConfigError(
                E_FIELD, file, "auth.tokens", "two entries hold the same token; give each principal its own"
            )
        )
    return tuple(entries), errors


def _http_problems(file_cfg: ServerConfigFile, file: str) -> list[ConfigError]:
    """What http: and auth: say together."""
    http, auth = file_cfg.http, file_cfg.auth
    problems = []
    if http.public_url is not None:
        problem = check_public_url(http.public_url)
        if problem:
            problems.append(ConfigError(E_FIELD, file, "http.public_url", problem))
    elif auth.mode == "oauth":
        problems.append(
            ConfigError(
                E_FIELD,
                file,
                "http.public_url",
                "auth mode oauth needs the URL clients use for MCP (e.g. https://parley.example.com/mcp): "
                "tokens must be issued for it (their audience) and the metadata names it",
            )
        )
    for i, host in enumerate(http.allowed_hosts):
        problem = check_allowed_host(host)
        if problem:
            problems.append(ConfigError(E_FIELD, file, f"http.allowed_hosts.{i}", problem))
    for i, address in enumerate(http.trusted_proxies):
        try:
            ipaddress.ip_network(address, strict=False)
        except ValueError:
            problems.append(
                ConfigError(
                    E_FIELD,
                    file,
                    f"http.trusted_proxies.{i}",
                    f"'{address}' is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/8)",
                )
            )
    for name in file_cfg.limits.principals:
        if not name:
            problems.append(ConfigError(E_FIELD, file, "limits.principals", "a principal name is empty"))
    return problems


def secret_from_env(name: str | None) -> str | None:
    """A credential, read from the environment variable the configuration names."""
    return os.environ.get(name) if name else None


def config_path_from_env(cli_value: str | None) -> Path | None:
    value = cli_value or os.environ.get("PARLEY_CONFIG")
    return Path(value) if value else None


def _storage_problems(storage: StorageConfig, file: str) -> list[ConfigError]:
    """What the fields of `storage:` say together: one database, and fields for its backend."""
    given = storage.model_fields_set
    if storage.url is not None and storage.path is not None:
        return [
            ConfigError(
                E_FIELD,
                file,
                "storage.url",
                "storage.path and storage.url are both set; keep one: path for a SQLite file, url for PostgreSQL",
            )
        ]
    problems = []
    if storage.url is not None:
        if not is_database_url(storage.url):
            problems.append(
                ConfigError(
                    E_FIELD,
                    file,
                    "storage.url",
                    "must start with postgresql:// (a SQLite file goes in storage.path)",
                )
            )
        problems += [
            ConfigError(
                E_FIELD, file, f"storage.{name}", "applies to SQLite only; remove it (storage.url is set)"
            )
            for name in _SQLITE_ONLY
            if name in given
        ]
    elif storage.path is not None:
        # (Without a path they may apply to a PostgreSQL URL given by --db or PARLEY_DB.)
        problems += [
            ConfigError(
                E_FIELD,
                file,
                f"storage.{name}",
                "applies to PostgreSQL (storage.url) only; remove it or set storage.url",
            )
            for name in _POSTGRES_ONLY
            if (name if name != "schema" else "db_schema") in given
        ]
    if storage.listen_url is not None and not is_database_url(storage.listen_url):
        problems.append(ConfigError(E_FIELD, file, "storage.listen_url", "must start with postgresql://"))
    if not _PLAIN_SCHEMA.fullmatch(storage.db_schema):
        problems.append(
            ConfigError(
                E_FIELD,
                file,
                "storage.schema",
                f"'{storage.db_schema}' is not a plain PostgreSQL name: use lowercase letters, digits and _ "
                "(at most 63, not starting with a digit or pg_)",
            )
        )
    return problems


def db_override_from_env(cli_value: str | None) -> Path | str | None:
    """The database named by --db (`cli_value`) or else PARLEY_DB: a PostgreSQL URL (a str; on the
    command line its ${NAME} references are expanded) or a SQLite file (a Path).

    Raises:
        ConfigError: a URL on the command line holds a password (every local account can read a
            command line), or names a variable that is not set.
    """
    value = cli_value or os.environ.get("PARLEY_DB")
    if not value:
        return None
    if not is_database_url(value):
        return Path(value)
    if not cli_value:
        return value  # from the environment: taken as it is, a password included
    if clear_text_password(cli_value):
        raise ConfigError(
            E_FIELD,
            "(command line)",
            "--db",
            "holds a password, which every local account can read in the process list; write "
            "'${PGPASSWORD}' in its place (quoted, so the shell leaves it) or set PGPASSWORD or PGPASSFILE",
        )
    return expand_database_url(cli_value, "(command line)", "--db")
