"""The retention sweep: a background task that removes what `retention:` in parley.yaml no
longer keeps (ended and idle sessions past their age, old events, settled webhook deliveries), in small batches, each its
own short transaction, yielding between batches so turns never wait behind a sweep. Several
processes may sweep the same database: each batch takes rows no other one holds."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
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
    deliveries: int
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
        # The current sweep's batches and its longest one (for the log line).
        self._batches, self._longest = 0, 0.0

    def _before(self, days: float | None, now: float) -> float | None:
        return now - days * DAY_S if days is not None else None

    async def sweep(self) -> SweepReport:
        """Remove everything the policy no longer keeps, a batch at a time."""
        config, now = self._config, self._clock()
        rule = SweepRule(
            ended_before=self._before(config.ended_sessions_after_days, now),
            idle_before=self._before(config.idle_sessions_after_days, now),
        )
        self._batches, self._longest = 0, 0.0
        sessions = 0
        if rule.ended_before is not None or rule.idle_before is not None:
            sessions = await self._in_batches(lambda: self._sweep_sessions(rule, now))
        events_before = self._before(config.events_after_days, now)
        events = 0
        if events_before is not None:
            events = await self._in_batches(
                lambda: self._store.purge_events(events_before, config.batch_size)
            )
        deliveries_before = self._before(config.webhook_deliveries_after_days, now)
        deliveries = 0
        if deliveries_before is not None:
            deliveries = await self._in_batches(
                lambda: self._store.purge_deliveries(deliveries_before, config.batch_size)
            )
        if sessions or events or deliveries:
            logger.info(
                "retention removed %d session(s), %d event(s) and %d webhook delivery(ies) in %d batch(es), "
                "the longest %.1f ms",
                sessions,
                events,
                deliveries,
                self._batches,
                self._longest * 1000,
            )
        return SweepReport(
            sessions=sessions,
            events=events,
            deliveries=deliveries,
            batches=self._batches,
            longest_batch_s=self._longest,
        )

    async def _in_batches(self, batch: Callable[[], Awaitable[int]]) -> int:
        """Run `batch` until one removes less than a full batch; the rows removed in all."""
        removed = 0
        while True:
            started = time.perf_counter()
            count = await batch()
            self._longest = max(self._longest, time.perf_counter() - started)
            self._batches += 1
            removed += count
            if count < self._config.batch_size:
                return removed
            await anyio.lowlevel.checkpoint()  # let turns' writes in between batches

    async def _sweep_sessions(self, rule: SweepRule, now: float) -> int:
        swept = await self._store.sweep_sessions(rule, now, self._config.batch_size)
        for session in swept:
            logger.info("session %s (%s, %s) removed by retention", session.id, session.owner, session.status)
            if self._signals is not None:
                self._signals.notify(session.id)  # its live streams end (session_deleted)
        return len(swept)

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
