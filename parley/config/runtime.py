"""`runtime:` (the timings and caps of a serving process) and `tasks:` (MCP tasks) in
parley.yaml."""

from __future__ import annotations

from pydantic import Field, model_validator

from parley.config.base import Strict

# The shortest pause between two looks at the agent files (tests look every 0.1 s).
MIN_RELOAD_S = 0.05


class RuntimeConfig(Strict):
    poll_interval_s: float = Field(
        0.5, gt=0, le=60, description="Seconds between two looks for work that other processes wrote."
    )
    lease_ttl_s: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="Seconds a crashed process keeps its sessions before others take over.",
    )
    default_wait_s: float = Field(
        45.0, ge=0, le=3600, description="wait_seconds (in seconds) when a caller gives none."
    )
    max_wait_s: float = Field(
        55.0,
        ge=0,
        le=3600,
        description="The largest wait_seconds a call may ask for; larger requests are lowered to it.",
    )
    max_message_chars: int = Field(
        100_000, ge=1, le=10_000_000, description="Longest message accepted, in characters."
    )
    shutdown_grace_s: float = Field(
        10.0, ge=0, le=3600, description="On shutdown, seconds running steps may take to finish."
    )
    max_model_attempts: int = Field(
        3, ge=1, le=20, description="Attempts of a model call on transient errors."
    )
    model_retry_backoff_s: float = Field(
        1.0,
        gt=0,
        le=600,
        description=(
            "Seconds before the second attempt of a model call; doubles after each attempt, up to 60 (a "
            "provider's Retry-After wins)."
        ),
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
        7 * 86_400,
        gt=0,
        description="The longest durable_wait an agent may ask for, in seconds (default 7 days).",
    )
    progress_interval_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="While a caller waits, the longest gap between progress notifications, in seconds.",
    )
    agent_reload_s: float = Field(
        2.0,
        ge=0,
        le=3600,
        description=(
            "Seconds between two looks of a running server for added, changed and removed agent files "
            "(and changes of agents_dir, model_aliases, default_model in parley.yaml), which it reloads; "
            "0: never; otherwise at least 0.05."
        ),
    )
    schedule_min_interval_s: float = Field(
        10.0,
        ge=1,
        le=86_400,
        description="The shortest every: a schedule may have, in seconds (at least 1).",
    )

    @model_validator(mode="after")
    def _reload_interval(self) -> RuntimeConfig:
        if 0 < self.agent_reload_s < MIN_RELOAD_S:
            raise ValueError(f"runtime.agent_reload_s must be 0 (off) or at least {MIN_RELOAD_S}")
        return self


class TasksConfig(Strict):
    """MCP tasks (turns a client follows by task id instead of a blocking call)."""

    default_ttl_s: float = Field(
        7 * 86_400,
        gt=0,
        description=(
            "Seconds a task is kept after it was created, when the client asks no TTL; at most max_ttl_s."
        ),
    )
    max_ttl_s: float = Field(
        30 * 86_400,
        gt=0,
        description="The longest TTL a client may ask for, in seconds; longer requests are lowered.",
    )
    poll_interval_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="The polling interval suggested to clients (pollInterval), in seconds.",
    )
    list_page_size: int = Field(50, ge=1, le=1000, description="Tasks per page of tasks/list.")
    purge_interval_s: float = Field(
        60.0, gt=0, le=86_400, description="Seconds between two deletions of expired tasks."
    )
    status_poll_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description=(
            "For status notifications: seconds between two looks (one query) for watched tasks that "
            "another process changed (changes made by this process are sent at once)."
        ),
    )
    max_watched: int = Field(
        1000,
        ge=0,
        le=1_000_000,
        description=(
            "Tasks per process whose status changes are pushed to their client; more are only polled."
        ),
    )

    @model_validator(mode="after")
    def _ttls(self) -> TasksConfig:
        if self.default_ttl_s > self.max_ttl_s:
            raise ValueError("tasks: default_ttl_s must not exceed max_ttl_s")
        return self
