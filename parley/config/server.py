"""parley.yaml as a whole: `ServerConfigFile`, its fields as written, and `ServerConfig`, the
loaded configuration the server runs on (loading.py builds it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, model_validator

from parley.config.agent import AgentConfig
from parley.config.attachments import AttachmentsConfig
from parley.config.auth import AuditConfig, AuthConfig, LimitsConfig, TokenEntry
from parley.config.base import Strict
from parley.config.credentials import CredentialsConfig
from parley.config.http import HttpConfig
from parley.config.mcp import McpServerConfig
from parley.config.models import ModelSpec
from parley.config.retention import RetentionConfig
from parley.config.runtime import RuntimeConfig, TasksConfig
from parley.config.schedules import ScheduleConfig
from parley.config.storage import StorageConfig
from parley.config.ui import UiConfig
from parley.config.webhooks import TriggerConfig, WebhookSubscription, check_names
from parley.core.schedules import Schedule
from parley.errors import ConfigError
from parley.redaction import mask_url


class ServerConfigFile(Strict):
    storage: StorageConfig = Field(
        default_factory=lambda: StorageConfig(),
        description="The database: a SQLite file (the default, in the data folder) or PostgreSQL.",
    )
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
    runtime: RuntimeConfig = Field(
        default_factory=lambda: RuntimeConfig(),
        description="Timings and caps of each serving process: polling, leases, waits, retries, concurrency.",
    )
    http: HttpConfig = Field(
        default_factory=lambda: HttpConfig(),
        description="The streamable HTTP server of parley serve --http: address, caps, timeouts, /v1.",
    )
    tasks: TasksConfig = Field(
        default_factory=lambda: TasksConfig(),
        description="MCP tasks: how long they are kept, paging, status notifications.",
    )
    mcp_servers: dict[str, McpServerConfig] = Field(
        default_factory=dict,
        description=(
            "MCP servers whose tools agents may use, by a name of yours (letters, digits, _ or -, at "
            "most 32); an agent's mcp_servers lists the ones it uses."
        ),
    )
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
    webhooks: dict[str, WebhookSubscription] = Field(
        default_factory=dict,
        description="Outbound webhooks by a name of yours: where events are POSTed, signed with Standard Webhooks.",
    )
    triggers: dict[str, TriggerConfig] = Field(
        default_factory=dict,
        description="Inbound triggers by name: POST /v1/triggers/{name} starts a session of the trigger's agent.",
    )
    ui: UiConfig = Field(
        default_factory=lambda: UiConfig(), description="The page for people at /ui: how it signs people in."
    )
    schedules: dict[str, ScheduleConfig] = Field(
        default_factory=dict,
        description=(
            "Sessions that start on their own, by a name of yours (letters, digits, _ or -, at most 31): "
            "read-only for the schedule tools."
        ),
    )
    credentials: CredentialsConfig | None = Field(
        None,
        description=(
            "The key that encrypts each principal's credentials for downstream servers (tokens stored "
            "encrypted with AES-GCM), and the previous keys a rotation still reads."
        ),
    )

    @model_validator(mode="after")
    def _server_names(self) -> ServerConfigFile:
        for name in self.mcp_servers:
            if not _SERVER_NAME.fullmatch(name):
                raise ValueError(f"mcp_servers: '{name}' must be letters, digits, _ or - (at most 32)")
        check_names(self.webhooks, "webhooks")
        check_names(self.triggers, "triggers")
        return self


_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


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
    ui: UiConfig = field(default_factory=UiConfig)
    # schedules: as the runtime runs them (checked against the agents).
    schedules: tuple[Schedule, ...] = ()
    # What agent files ask that parley serves differently (skipped tools, the default model...).
    agent_notices: tuple[ConfigError, ...] = ()
    webhooks: dict[str, WebhookSubscription] = field(default_factory=dict)
    triggers: dict[str, TriggerConfig] = field(default_factory=dict)
    # Where the credential keys are (read when needed: credential_keys in loading.py).
    credentials: CredentialsConfig | None = None

    @property
    def db_label(self) -> str:
        """The database as messages and logs name it: the file, or the URL without its password."""
        if self.db_url is not None:
            return f"{mask_url(self.db_url)} (schema {self.storage.db_schema})"
        return str(self.db_path)
