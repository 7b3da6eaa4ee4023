"""The retention sweep: a background task that removes what `retention:` in parley.yaml no
longer keeps (ended and idle sessions past their age, old events), in small batches, each its
own short transaction, yielding between batches so turns never wait behind a sweep. Several
processes may sweep the same database: each batch takes rows no other one holds."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

from parley.config.retention import RetentionConfig
from parley.core.records import SweepRule
from parley.errors import StorageError
from parley.runtime.signals import SessionSignals
from parley.storage.ports import RetentionSweeps

logger = logging.getLogger(__name__)

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep removed, and how long its longest batch took."""

    sessions: int
    events: int
    batches: int
    longest_batch_s: float


class RetentionSweep:
    def __init__(
        self,
        store: RetentionSweeps,
        config: RetentionConfig,
        clock: Callable[[], float],
        signals: SessionSignals | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._signals = signals

    def _before(self, days: float | None, now: float) -> float | None:
        return now - days * DAY_S if days is not None else None

    async def sweep(self) -> SweepReport:
        """Remove everything the policy no longer keeps, a batch at a time."""
        config, now = self._config, self._clock()
        rule = SweepRule(
            ended_before=self._before(config.ended_sessions_after_days, now),
            idle_before=self._before(config.idle_sessions_after_days, now),
        )
        sessions = events = batches = 0
        longest = 0.0
        if rule.ended_before is not None or rule.idle_before is not None:
            while True:
                started = time.perf_counter()
                swept = await self._store.sweep_sessions(rule, now, config.batch_size)
                longest = max(longest, time.perf_counter() - started)
                batches += 1
                sessions += len(swept)
                for session in swept:
                    logger.info(
                        "session %s (%s, %s) removed by retention", session.id, session.owner, session.status
                    )
                    if self._signals is not None:
                        self._signals.notify(session.id)  # its live streams end (session_deleted)
                if len(swept) < config.batch_size:
                    break
                await anyio.lowlevel.checkpoint()  # let turns' writes in between batches
        events_before = self._before(config.events_after_days, now)
        if events_before is not None:
            while True:
                started = time.perf_counter()
                purged = await self._store.purge_events(events_before, config.batch_size)
                longest = max(longest, time.perf_counter() - started)
                batches += 1
                events += purged
                if purged < config.batch_size:
                    break
                await anyio.lowlevel.checkpoint()
        if sessions or events:
            logger.info(
                "retention removed %d session(s) and %d event(s) in %d batch(es), the longest %.1f ms",
                sessions,
                events,
                batches,
                longest * 1000,
            )
        return SweepReport(sessions=sessions, events=events, batches=batches, longest_batch_s=longest)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Sweep now and every `interval_s` (nothing at all without an age configured)."""
        task_status.started()
        if not self._config.enabled:
            return
        while True:
            try:
                await self.sweep()
            except StorageError as exc:
                # The database's condition is reported by /healthz; the next round tries again.
                logger.warning(
                    "the retention sweep failed: %s; trying again in %.1f s", exc, self._config.interval_s
                )
            await anyio.sleep(self._config.interval_s)
