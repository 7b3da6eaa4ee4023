"""One schedule runner per process, beside the scheduler: it finds each schedule's due tick,
claims it in the database and starts its session through the session service
(docs/schedules.md#how-a-tick-runs).

Every replica runs one. They compute the same ticks; the claim (a row per schedule and tick, in
the transaction that starts the session) lets one of them have each tick, so a tick starts at most
one session however many replicas run and however often they restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from parley.config.codes import E_SCHEDULE_NAME
from parley.core.schedules import (
    Schedule,
    TickClaim,
    TickRecord,
    due_tick,
    overlap_outcome,
    previous_at_rest,
)
from parley.errors import ConfigError, ConfigErrors, RequestError
from parley.runtime.background import log_pass_failure
from parley.runtime.service.schedules import ScheduleCommands
from parley.storage.integration_ports import ScheduleStore

logger = logging.getLogger(__name__)

# The longest pause between two passes: schedules made, paused or deleted with the tools (by
# any replica) are seen within it.
MAX_PAUSE_S = 2.0
# The shortest: a pass that ends just before a tick does not spin.
MIN_PAUSE_S = 0.02
# Ticks are kept this long (each schedule's latest always), for list_schedules and the audit.
KEEP_TICKS_S = 7 * 86_400.0
PRUNE_EVERY_S = 3600.0


async def check_schedule_names(configured: list[Schedule], store: ScheduleStore, file: str) -> None:
    """A name in parley.yaml that a schedule made with the tools also has is an error at start."""
    names = {s.name for s in configured}
    clashes = sorted(s.name for s in await store.list_schedules() if s.name in names)
    if clashes:
        raise ConfigErrors(
            [
                ConfigError(
                    E_SCHEDULE_NAME,
                    file,
                    f"schedules.{name}",
                    "a schedule made with the tools has this name too: rename this one, or delete that "
                    "one (delete_schedule, or DELETE /v1/schedules/NAME) first",
                )
                for name in clashes
            ]
        )


class ScheduleRunner:
    def __init__(
        self,
        commands: ScheduleCommands,
        store: ScheduleStore,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._commands = commands
        self._store = store
        self._clock = clock
        self._sleep = sleep
        self._pruned_at: float | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            pause = MAX_PAUSE_S
            try:
                pause = await self.run_due()
            except Exception:
                # A bug or a broken row must not stop the schedules for good: the next pass retries.
                log_pass_failure(logger, "running schedules")
            await self._sleep(pause)

    async def run_due(self) -> float:
        """One pass: act on each schedule's due tick. Returns the seconds until the next tick of
        any schedule (at most MAX_PAUSE_S)."""
        now = self._clock()
        schedules = [s for s in await self._commands.all() if not s.paused]
        if not schedules:
            return MAX_PAUSE_S
        latest = await self._store.latest_ticks()
        queued = {t.schedule: t for t in await self._store.queued_ticks()}
        for schedule in schedules:
            last, previous = latest.get(schedule.name, (None, None))
            await self._one(schedule, last, previous, queued.get(schedule.name), now)
        await self._prune(now)
        upcoming = [t for s in schedules if (t := s.timing.next_after(now)) is not None]
        pause = min(upcoming, default=now + MAX_PAUSE_S) - now
        return max(MIN_PAUSE_S, min(pause, MAX_PAUSE_S))

    async def _one(
        self,
        schedule: Schedule,
        last: TickRecord | None,
        previous: str | None,
        queued: TickRecord | None,
        now: float,
    ) -> None:
        # overlap queue: once the previous run ended, the tick that waited for it runs.
        waited = queued.tick_at if queued is not None and previous_at_rest(previous) else None
        if waited is not None and await self._start(schedule, TickClaim(schedule.name, waited, queued=True)):
            previous, queued = "running", None
        due = due_tick(schedule.timing, schedule.catch_up, last.tick_at if last else None, now)
        if due is None:
            return
        outcome = overlap_outcome(schedule.overlap, previous, queued is not None)
        if outcome == "started":
            await self._start(schedule, TickClaim(schedule.name, due.tick_at))
        elif await self._store.claim_tick(schedule.name, due.tick_at, outcome, now):
            logger.info(
                "schedule %s: tick %s %s (its previous session still runs)",
                schedule.name,
                due.tick_at,
                "queued" if outcome == "queued" else "skipped",
            )

    async def _start(self, schedule: Schedule, claim: TickClaim) -> bool:
        try:
            return await self._commands.start_tick(schedule, claim) is not None
        except RequestError as exc:
            # The agent is gone, the owner is over a fair-use limit...: the tick is not claimed,
            # and a later pass (while it is on time) or the next tick tries again.
            logger.warning("schedule %s could not start a session: %s", schedule.name, exc)
            return False

    async def _prune(self, now: float) -> None:
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        await self._store.prune_ticks(now - KEEP_TICKS_S)
