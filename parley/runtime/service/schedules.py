"""Schedules in the session service: a tick's session started as any other (the owner's fair
use, the agent's checks, the audit), its tick claimed in the session's own transaction; and the
admins' commands on the schedules made with the tools (docs/schedules.md)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from parley.config import AgentConfig
from parley.config.schedules import agent_problem_of, check_name, timing_of
from parley.core import transitions
from parley.core.changes import Admit
from parley.core.ids import SessionId, new_session_id
from parley.core.records import QueuedMessageRecord, SessionRecord
from parley.core.schedules import CatchUp, Overlap, Schedule, TickClaim, TickRecord, TimingError
from parley.core.scopes import USE
from parley.errors import InvalidArgument, NotAdmin, RateLimited
from parley.runtime import audit
from parley.runtime.access import Principal
from parley.runtime.fair_use import FairUse
from parley.runtime.service.checks import Checks, render_first_message
from parley.runtime.service.parts import Parts
from parley.runtime.session_labels import TAGS_MAX, check_tags
from parley.runtime.session_log import about

logger = logging.getLogger("parley.runtime.service")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRequest:
    """create_schedule: a schedule to store (owner None: the caller)."""

    name: str
    agent: str
    cron: str | None = None
    timezone: str = "UTC"
    every: str | float | None = None
    message: str | None = None
    inputs: dict[str, Any] | None = None
    owner: str | None = None
    tags: Sequence[str] = ()
    overlap: Overlap = "skip"
    catch_up: CatchUp = "skip"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleView:
    """A schedule as list_schedules shows it: its last claimed tick and its next run."""

    schedule: Schedule
    last: TickRecord | None
    next_run: float | None


def schedule_principal(schedule: Schedule) -> Principal:
    """Whom a schedule's sessions belong to, as the access rules and the audit see the starter:
    its owner with the use scope, the schedule named as the client."""
    return Principal(
        id=schedule.owner, scopes=frozenset({USE}), client=f"schedule:{schedule.name}", authenticated=True
    )


class ScheduleCommands:
    def __init__(
        self, parts: Parts, checks: Checks, fair_use: FairUse, configured: Sequence[Schedule]
    ) -> None:
        self._parts = parts
        self._checks = checks
        self._fair_use = fair_use
        self._configured = {s.name: s for s in configured}

    @property
    def configured(self) -> list[Schedule]:
        return list(self._configured.values())

    async def all(self) -> list[Schedule]:
        """Every schedule: parley.yaml's, then the database's (a name in both: config wins;
        `parley serve` refuses to start with one, PARLEY-C025)."""
        stored = await self._parts.store.list_schedules()
        return [*self._configured.values(), *(s for s in stored if s.name not in self._configured)]

    # ------------------------------------------------------------------ a tick's session

    async def start_tick(self, schedule: Schedule, tick: TickClaim) -> SessionId | None:
        """The session of `tick`, started unless another start claimed the tick (None)."""
        p, checks = self._parts, self._checks
        owner = schedule_principal(schedule)
        agent = checks.agent(owner, schedule.agent)
        kind = _kind(agent, schedule)
        checks.inputs(agent, schedule.inputs)
        text = render_first_message(schedule.message, schedule.inputs)
        if text is None:
            raise InvalidArgument("message", f"schedule '{schedule.name}' gives its sessions nothing to do")
        now = p.clock()
        session_id = new_session_id()
        queued = QueuedMessageRecord.new(session_id, text, now=now)
        record = SessionRecord.new(
            session_id,
            agent=agent.name,
            owner=owner.id,
            kind=kind,
            now=now,
            inputs=schedule.inputs,
            title=f"{schedule.name}: {agent.name}"[:200],
            tags=schedule.session_tags[:TAGS_MAX],
        )
        record = replace(record, owner_credentials=schedule.carries_owner_credentials)
        claim = self._fair_use.claim(owner, new_session=True, message=True, now=now)
        admit = (
            None if claim is None else Admit(claim.scope, lambda usage: claim.admit(usage, starts_turn=True))
        )
        entry = p.audit.entry(owner, audit.SCHEDULED, session_id=session_id, target=queued.id)
        try:
            created = await p.store.create_session(
                transitions.starting(record, queued), queued, now, admit=admit, audit=entry, tick=tick
            )
        except RateLimited as exc:
            await p.audit.refused(owner, audit.SCHEDULED, None, None, str(exc), reason="limit")
            raise
        if not created:
            return None
        logger.info(
            "schedule %s started session %s with agent %s",
            schedule.name,
            session_id,
            agent.name,
            extra=about(record),
        )
        p.signals.work_available(session_id)
        return session_id

    # ------------------------------------------------------------------ the admins' commands

    async def create(self, caller: Principal, request: ScheduleRequest) -> Schedule:
        await self._admin(caller, "create_schedule", request.name)
        problem = check_name(request.name)
        if problem:
            raise InvalidArgument("name", problem)
        if request.name in self._configured:
            raise InvalidArgument(
                "name", f"schedule '{request.name}' is defined in parley.yaml; choose another name"
            )
        try:
            timing = timing_of(request.cron, request.timezone, request.every)
        except TimingError as exc:
            field = (
                "every" if request.every is not None else "timezone" if "time zone" in str(exc) else "cron"
            )
            raise InvalidArgument(field, str(exc)) from exc
        minimum = self._parts.runtime.schedule_min_interval_s
        if timing.every_s is not None and timing.every_s < minimum:
            raise InvalidArgument(
                "every", f"is {timing.every_s:g}s, shorter than this server's minimum of {minimum:g}s"
            )
        schedule = Schedule(
            name=request.name,
            timing=timing,
            agent=request.agent,
            owner=request.owner or caller.id,
            message=self._checks.message(request.message) if request.message is not None else None,
            inputs=request.inputs,
            tags=tuple(check_tags(list(request.tags))),
            overlap=request.overlap,
            catch_up=request.catch_up,
            source="database",
            created_by=caller.id,
            created_at=self._parts.clock(),
        )
        self._check_agent(schedule)
        if not await self._parts.store.create_schedule(schedule):
            raise InvalidArgument("name", f"a schedule named '{request.name}' exists; choose another name")
        await self._parts.audit.record(
            caller, audit.SCHEDULE, session_id=None, target=schedule.name, what="create"
        )
        return schedule

    def _check_agent(self, schedule: Schedule) -> None:
        agent: AgentConfig | None = self._parts.agents.get(schedule.agent)
        problem = agent_problem_of(agent, schedule.agent, schedule.message, schedule.inputs)
        if problem is not None:
            field, text = problem
            raise InvalidArgument("inputs" if field == "input" else field, text)

    async def views(self, caller: Principal) -> list[ScheduleView]:
        await self._admin(caller, "list_schedules", None)
        ticks = await self._parts.store.latest_ticks()
        now = self._parts.clock()
        views = []
        for schedule in await self.all():
            last = ticks.get(schedule.name)
            after = max(now, last[0].tick_at) if last else now
            next_run = None if schedule.paused else schedule.timing.next_after(after)
            views.append(ScheduleView(schedule=schedule, last=last[0] if last else None, next_run=next_run))
        return views

    async def set_paused(self, caller: Principal, name: str, paused: bool) -> Schedule:
        what = "pause_schedule" if paused else "resume_schedule"
        await self._admin(caller, what, name)
        self._not_configured(name)
        found = [s for s in await self._parts.store.list_schedules() if s.name == name]
        if not found:
            raise InvalidArgument("name", f"no schedule named '{name[:40]}'; list_schedules shows them")
        if not paused:
            # The ticks that passed while it was paused are not run later, not even by catch_up: once.
            now = self._parts.clock()
            latest = found[0].timing.latest_at_or_before(now)
            if latest is not None:
                await self._parts.store.claim_tick(name, latest, "skipped", now)
        if not await self._parts.store.set_schedule_paused(name, paused):
            raise InvalidArgument("name", f"schedule '{name[:40]}' was just deleted")
        await self._parts.audit.record(caller, audit.SCHEDULE, session_id=None, target=name, what=what)
        return replace(found[0], paused=paused)

    async def delete(self, caller: Principal, name: str) -> None:
        await self._admin(caller, "delete_schedule", name)
        self._not_configured(name)
        if not await self._parts.store.delete_schedule(name):
            raise InvalidArgument("name", f"no schedule named '{name[:40]}'; list_schedules shows them")
        await self._parts.audit.record(caller, audit.SCHEDULE, session_id=None, target=name, what="delete")

    async def _admin(self, caller: Principal, what: str, name: str | None) -> None:
        """Only an admin manages schedules; a refusal is in the audit trail, as `schedule`."""
        if not caller.is_admin:
            refusal = NotAdmin(what)
            await self._parts.audit.refused(
                caller, audit.SCHEDULE, None, (name or "")[:100] or None, str(refusal), what=what
            )
            raise refusal

    def _not_configured(self, name: str) -> None:
        if name in self._configured:
            raise InvalidArgument(
                "name",
                f"schedule '{name}' is defined in parley.yaml and is read-only here: change it in parley.yaml",
            )


def _kind(agent: AgentConfig, schedule: Schedule) -> str:
    """A schedule with inputs runs a task session when the agent runs tasks; else the agent's default."""
    if schedule.inputs is not None and "task" in agent.kinds:
        return "task"
    return agent.resolved_default_kind
