"""`mcp_servers:` in parley.yaml: the MCP servers whose tools agents may use, how parley talks to
them, and the policies of their tools (an agent's own policies are in agent.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from parley.config.base import Strict
from parley.config.mcp_auth import UserOAuthConfig

Effect = Literal["read", "idempotent_write", "non_idempotent_write", "unclassified"]
ApprovalPolicy = Literal["always", "never", "auto"]


class ToolPolicy(Strict):
    """Per-tool policy; an unset field falls to the next source (docs/mcp-servers.md#effects-and-approval)."""

    effect: Effect | None = Field(
        None, description="read, idempotent_write, non_idempotent_write or unclassified."
    )
    approval: ApprovalPolicy | None = Field(
        None, description="always, never, or auto (decided by the effect and destructiveness)."
    )


class McpServerConfig(Strict):
    """An MCP server whose tools agents may use. Only server-side configuration names these."""

    command: str | None = Field(None, description="stdio: the program to start.")
    args: list[str] = Field(default_factory=list, description="stdio: the program's arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: extra environment variables.")
    cwd: str | None = Field(
        None, description="stdio: the program's working directory (default: parley's own)."
    )
    url: str | None = Field(None, description="streamable HTTP: the server's MCP endpoint.")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP: extra request headers.")
    headers_by_principal: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description=(
            "HTTP: request headers by principal (e.g. each user's own token, from ${NAME}). A session's calls "
            "carry its owner's headers, on a connection of that principal's own; a principal without an "
            "entry gets a tool error and no call, never another principal's headers."
        ),
    )
    auth: UserOAuthConfig | None = Field(
        None,
        description=(
            "HTTP: how each principal's token for this server is obtained ({mode: user_oauth, ...}); needs "
            "credentials: and http.public_url. Unset: the server gets headers only."
        ),
    )
    trust_annotations: bool = Field(
        True, description="Use the server's tool annotations to classify effects."
    )
    scope: Literal["shared", "per_session"] = Field(
        "shared", description="per_session: each agent session gets its own connection (stateful servers)."
    )
    connect_timeout_s: float = Field(
        20.0,
        gt=0,
        le=600,
        description="Seconds to connect (start the program, or open HTTP) and complete the handshake.",
    )
    list_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Seconds the server may take to list its tools."
    )
    call_timeout_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description=(
            "Seconds one request may take (a tool call, a task's poll, a resource read). A tool call "
            "unanswered by then is retried only if its effect allows (read, idempotent_write); else its "
            "outcome is unknown."
        ),
    )
    list_ttl_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="Seconds a tool listing is reused before the server is asked again.",
    )
    retry_backoff_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description=(
            "After a failed listing, seconds before the server is asked again; doubles with each failure in "
            "a row, up to 300."
        ),
    )
    idle_timeout_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description=(
            "per_session, headers_by_principal, user_oauth: a session's or a principal's connection unused for "
            "this many seconds is closed."
        ),
    )
    max_result_chars: int = Field(
        20_000,
        ge=100,
        le=10_000_000,
        description="Longest tool result passed to the model, in characters; longer ones are cut.",
    )
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
        86_400.0, gt=0, le=30 * 86_400, description="The TTL parley asks for a downstream task, in seconds."
    )
    task_poll_min_s: float = Field(
        0.5,
        gt=0,
        le=3600,
        description=(
            "Seconds of the first (shortest) pause between two polls of a downstream task; at most "
            "task_poll_max_s."
        ),
    )
    task_poll_max_s: float = Field(
        60.0, gt=0, le=86_400, description="Polls back off (x1.5 each time) up to this pause, in seconds."
    )
    task_poll_failures: int = Field(
        5, ge=1, le=1000, description="Failed polls in a row before a downstream task counts as lost."
    )
    input_wait_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description=(
            "Seconds a question the server asks waits for the user before parley answers 'cancel' "
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
        if self.headers_by_principal and self.url is None:
            raise ValueError("'headers_by_principal' is for HTTP servers ('url'); a stdio server takes 'env'")
        if self.auth is not None and self.url is None:
            raise ValueError("'auth' is for HTTP servers ('url'): a stdio server is started by parley itself")
        if self.auth is not None and self.headers_by_principal:
            raise ValueError(
                "give 'auth' (user_oauth: each principal's token from OAuth) or 'headers_by_principal' "
                "(each principal's token from the environment), not both"
            )
        if self.task_poll_min_s > self.task_poll_max_s:
            raise ValueError("'task_poll_min_s' must not exceed 'task_poll_max_s'")
        return self
