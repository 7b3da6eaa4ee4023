"""`schedules:` in parley.yaml: sessions that start on their own, at the times of a cron
expression in a time zone or at an interval, for an agent, owned by a principal
(docs/schedules.md). The fields are checked here; what they say together with the agents and
`runtime.schedule_min_interval_s` is checked by `schedule_problems`, each with its own code."""

from __future__ import annotations

import re
from typing import Any, Literal

from jsonschema import Draft202012Validator
from pydantic import Field, field_validator, model_validator

from parley.config.agent import AgentConfig
from parley.config.base import Strict
from parley.config.codes import E_SCHEDULE_AGENT, E_SCHEDULE_INTERVAL, E_SCHEDULE_TIMING
from parley.core.schedules import NAME_PATTERN, NAME_RULE, Schedule, Timing, TimingError, parse_every
from parley.core.scopes import LOCAL
from parley.errors import ConfigError

# A session's tag, as runtime/session_labels.py checks one (the configuration is read first).
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,39}")
# The shortest interval a configuration may lower runtime.schedule_min_interval_s to.
FLOOR_INTERVAL_S = 1.0


class ScheduleConfig(Strict):
    """One schedule: when (cron and timezone, or every), which agent with what, for whom, how."""

    cron: str | None = Field(
        None,
        description=(
            "A cron expression (minute hour day month weekday), e.g. '0 8 * * 1-5' for weekdays at 08:00, "
            "read in timezone; daylight-saving changes are handled. Give cron or every."
        ),
    )
    timezone: str = Field("UTC", description="The IANA time zone of cron, e.g. Europe/Berlin.")
    every: str | float | None = Field(
        None,
        description=(
            "An interval instead of cron: seconds, or a number and a unit (30s, 5m, 1h, 1d); at least "
            "runtime.schedule_min_interval_s."
        ),
    )
    agent: str = Field(description="The agent each session runs.")
    message: str | None = Field(
        None,
        min_length=1,
        max_length=100_000,
        description="The first message of each session (a chat agent; a task agent may add one).",
    )
    input: dict[str, Any] | None = Field(
        None, description="The inputs of each session of a task agent, checked against its input_schema."
    )
    owner: str = Field(
        LOCAL,
        min_length=1,
        max_length=300,
        description="The principal the sessions belong to (a token's name, '<issuer>#<subject>', or local).",
    )
    tags: list[str] = Field(
        default_factory=list,
        max_length=10,
        description=(
            "Tags of each session, besides schedule:NAME: 1 to 40 ASCII letters and digits, then also . _ : / -."
        ),
    )
    overlap: Literal["skip", "queue", "allow"] = Field(
        "skip",
        description=(
            "While the previous session still runs: skip the tick, queue it (one waits, started when the "
            "previous ends), or allow a second session."
        ),
    )
    catch_up: Literal["skip", "once"] = Field(
        "skip",
        description="After a downtime: skip the missed ticks, or run once for them.",
    )

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not TAG_PATTERN.fullmatch(tag):
                raise ValueError(
                    f"{tag[:45]!r} is not a tag: 1 to 40 ASCII letters and digits, then also . _ : / -"
                )
        return tags

    @model_validator(mode="after")
    def _when(self) -> ScheduleConfig:
        if (self.cron is None) == (self.every is None):
            raise ValueError("give either cron (with timezone) or every, not both and not neither")
        if self.message is None and self.input is None:
            raise ValueError("give message (a chat agent) or input (a task agent), or both")
        return self


def timing_of(cron: str | None, timezone: str, every: str | float | None) -> Timing:
    """The timing those fields say (TimingError: what is wrong, and the fix)."""
    if every is not None:
        return Timing(every_s=parse_every(every))
    return Timing(cron=cron, tz=timezone)


def check_name(name: str) -> str | None:
    """Why `name` cannot name a schedule, or None."""
    return None if NAME_PATTERN.fullmatch(name) else f"'{name[:40]}' is not a schedule name: {NAME_RULE}"


def schedule_problems(
    schedules: dict[str, ScheduleConfig], agents: dict[str, AgentConfig], min_interval_s: float, file: str
) -> tuple[list[Schedule], list[ConfigError]]:
    """The schedules as the runtime runs them, and every problem found in them."""
    found: list[Schedule] = []
    problems: list[ConfigError] = []
    for name, entry in schedules.items():
        where = f"schedules.{name}"
        problem = check_name(name)
        if problem:
            problems.append(ConfigError(E_SCHEDULE_TIMING, file, where, problem))
            continue
        try:
            timing = timing_of(entry.cron, entry.timezone, entry.every)
        except TimingError as exc:
            field = "every" if entry.every is not None else "cron" if "cron" in str(exc) else "timezone"
            problems.append(ConfigError(E_SCHEDULE_TIMING, file, f"{where}.{field}", str(exc)))
            continue
        if timing.every_s is not None and timing.every_s < min_interval_s:
            problems.append(
                ConfigError(
                    E_SCHEDULE_INTERVAL,
                    file,
                    f"{where}.every",
                    f"{timing.every_s:g}s is shorter than the minimum of {min_interval_s:g}s: make it longer, "
                    f"or lower runtime.schedule_min_interval_s (to {FLOOR_INTERVAL_S:g}s at least)",
                )
            )
            continue
        agent_problem = agent_problem_of(agents.get(entry.agent), entry.agent, entry.message, entry.input)
        if agent_problem is not None:
            field, text = agent_problem
            problems.append(ConfigError(E_SCHEDULE_AGENT, file, f"{where}.{field}", text))
            continue
        found.append(
            Schedule(
                name=name,
                timing=timing,
                agent=entry.agent,
                owner=entry.owner,
                message=entry.message,
                inputs=entry.input,
                tags=tuple(entry.tags),
                overlap=entry.overlap,
                catch_up=entry.catch_up,
            )
        )
    return found, problems


def agent_problem_of(
    agent: AgentConfig | None, name: str, message: str | None, inputs: dict[str, Any] | None
) -> tuple[str, str] | None:
    """What is wrong with starting `agent` with that message and input: the field and the fix."""
    if agent is None:
        return "agent", f"no agent named '{name}' is configured: name one of the agent files' agents"
    if inputs is not None and agent.input_schema is None:
        return "input", f"agent '{name}' takes no inputs: use message instead"
    if agent.input_schema is not None:
        errors = list(Draft202012Validator(agent.input_schema).iter_errors(inputs or {}))
        if errors:
            return "input", f"does not match agent '{name}''s input_schema: {errors[0].message}"
    if message is None and inputs is None:
        return "message", "give the message each session starts with"
    return None
