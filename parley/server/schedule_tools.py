"""The schedule tools, for callers with parley:admin: create_schedule, list_schedules,
pause_schedule, resume_schedule and delete_schedule (rows in tools.py), their arguments, their
outputs, and the views /v1 shares (docs/schedules.md#tools)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from parley.core.schedules import NAME_RULE, Schedule
from parley.runtime.service import SessionService
from parley.runtime.service.schedules import ScheduleRequest, ScheduleView
from parley.runtime.session_labels import format_time
from parley.server.results import ok
from parley.server.tool_args import DELETES
from parley.server.tool_table import NoArguments, ToolArguments
from parley.server.turn_calls import Caller

ScheduleNameArg = Annotated[
    str, Field(strict=True, min_length=1, max_length=100, description=f"The schedule's name ({NAME_RULE}).")
]
# Pausing and resuming change one flag; doing it again changes nothing.
SCHEDULE_CHANGES = DELETES.model_copy(update={"destructive_hint": False})


class LastTick(BaseModel):
    tick_at: str = Field(description="The tick's time (ISO 8601, UTC).")
    status: Literal["started", "skipped", "queued"]
    session_id: str | None = Field(description="The session it started (none when skipped or queued).")


class ScheduleItem(BaseModel):
    name: str
    source: Literal["config", "database"] = Field(
        description="parley.yaml (read-only here) or made with the tools."
    )
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
    last_run: LastTick | None = Field(description="Its latest claimed tick (none yet: null).")
    next_run: str | None = Field(description="When it ticks next (paused: null).")


class ScheduleList(BaseModel):
    schedules: list[ScheduleItem]


class ScheduleChange(BaseModel):
    name: str
    status: Literal["created", "paused", "resumed", "deleted"]


def schedule_item(schedule: Schedule, view: ScheduleView | None = None) -> ScheduleItem:
    last = view.last if view else None
    return ScheduleItem(
        name=schedule.name,
        source=schedule.source,
        cron=schedule.timing.cron,
        timezone=schedule.timing.tz,
        every_s=schedule.timing.every_s,
        agent=schedule.agent,
        owner=schedule.owner,
        message=schedule.message,
        inputs=schedule.inputs,
        tags=list(schedule.tags),
        overlap=schedule.overlap,
        catch_up=schedule.catch_up,
        paused=schedule.paused,
        created_by=schedule.created_by,
        last_run=None
        if last is None
        else LastTick(tick_at=format_time(last.tick_at), status=last.status, session_id=last.session_id),
        next_run=format_time(view.next_run) if view and view.next_run is not None else None,
    )


class CreateScheduleArguments(ToolArguments):
    name: ScheduleNameArg
    agent: Annotated[str, Field(strict=True, max_length=200, description="The agent each session runs.")]
    cron: Annotated[
        str | None,
        Field(
            strict=True,
            max_length=200,
            description="A cron expression (minute hour day month weekday), e.g. '0 8 * * 1-5'. Give cron or every.",
        ),
    ] = None
    timezone: Annotated[
        str, Field(strict=True, max_length=100, description="The IANA time zone of cron, e.g. Europe/Berlin.")
    ] = "UTC"
    every: Annotated[
        str | None,
        Field(strict=True, max_length=40, description="An interval instead of cron: 30s, 5m, 1h, 1d."),
    ] = None
    message: Annotated[
        str | None, Field(strict=True, description="The first message of each session (a chat agent).")
    ] = None
    inputs: Annotated[
        dict[str, Any] | None,
        Field(strict=True, description="A task agent's inputs, checked against its input_schema."),
    ] = None
    owner: Annotated[
        str | None,
        Field(
            strict=True,
            min_length=1,
            max_length=300,
            description="The principal the sessions belong to (default: you).",
        ),
    ] = None
    tags: Annotated[
        list[str],
        Field(strict=True, max_length=10, description="Tags of each session, besides schedule:NAME."),
    ] = []
    overlap: Annotated[
        Literal["skip", "queue", "allow"],
        Field(description="While the previous session runs: skip the tick, queue one, or allow another."),
    ] = "skip"
    catch_up: Annotated[
        Literal["skip", "once"], Field(description="After a downtime: skip missed ticks, or run once.")
    ] = "skip"


def request_of(args: CreateScheduleArguments) -> ScheduleRequest:
    return ScheduleRequest(
        name=args.name,
        agent=args.agent,
        cron=args.cron,
        timezone=args.timezone,
        every=args.every,
        message=args.message,
        inputs=args.inputs,
        owner=args.owner,
        tags=args.tags,
        overlap=args.overlap,
        catch_up=args.catch_up,
    )


async def create_schedule(
    service: SessionService, caller: Caller, args: CreateScheduleArguments
) -> CallToolResult:
    """Make a schedule (needs parley:admin): sessions of an agent started at the times of a cron
    expression in a time zone, or at an interval, owned by you (or by `owner`). Its sessions are
    tagged schedule:NAME. Nothing is stored when an argument is wrong."""
    made = await service.schedules.create(caller.who, request_of(args))
    return ok(ScheduleChange(name=made.name, status="created"), f"Schedule {made.name} was created.")


async def list_schedules(service: SessionService, caller: Caller, args: NoArguments) -> CallToolResult:
    """List every schedule (needs parley:admin), from parley.yaml and made with the tools: when it
    ticks, its agent and owner, whether it is paused, its last run and its next run."""
    views = await service.schedules.views(caller.who)
    listing = ScheduleList(schedules=[schedule_item(v.schedule, v) for v in views])
    lines = [
        f"- {item.name} ({item.source}{', paused' if item.paused else ''}): agent {item.agent}, "
        f"next {item.next_run or '-'}, last {item.last_run.tick_at + ' ' + item.last_run.status if item.last_run else '-'}"
        for item in listing.schedules
    ]
    return ok(listing, "\n".join(lines) or "No schedules.")


class ScheduleNameArguments(ToolArguments):
    name: ScheduleNameArg


async def pause_schedule(
    service: SessionService, caller: Caller, args: ScheduleNameArguments
) -> CallToolResult:
    """Stop a schedule made with the tools from starting sessions (needs parley:admin); ticks while
    it is paused are not run later. Pausing again changes nothing."""
    await service.schedules.set_paused(caller.who, args.name, True)
    return ok(ScheduleChange(name=args.name, status="paused"), f"Schedule {args.name} is paused.")


async def resume_schedule(
    service: SessionService, caller: Caller, args: ScheduleNameArguments
) -> CallToolResult:
    """Let a paused schedule start sessions again, from its next tick (needs parley:admin)."""
    await service.schedules.set_paused(caller.who, args.name, False)
    return ok(ScheduleChange(name=args.name, status="resumed"), f"Schedule {args.name} runs again.")


async def delete_schedule(
    service: SessionService, caller: Caller, args: ScheduleNameArguments
) -> CallToolResult:
    """Delete a schedule made with the tools and its ticks (needs parley:admin); its sessions stay."""
    await service.schedules.delete(caller.who, args.name)
    return ok(ScheduleChange(name=args.name, status="deleted"), f"Schedule {args.name} was deleted.")
