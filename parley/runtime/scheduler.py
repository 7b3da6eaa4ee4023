"""One scheduler per process: finds sessions with work whose lease is free and drives them
(docs/design.md#the-scheduler)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import anyio
from anyio.abc import TaskStatus

from parley.core.changes import Claimed
from parley.core.ids import SessionId
from parley.errors import StorageUnavailable
from parley.runtime.background import log_pass_failure
from parley.runtime.claim_start import STEP_VIEW, StartedTurn
from parley.runtime.driver import DriveSettings, SessionDriver
from parley.runtime.signals import SessionSignals
from parley.storage.ports import Store

logger = logging.getLogger(__name__)

# How many sessions one scan considers; the rest wait for the next scan.
SCAN_BATCH = 200
# A session whose driving crashed (a bug, a broken database row) is retried after a pause that
# doubles up to this cap, so one bad session cannot spin a process.
MAX_RETRY_PAUSE_S = 60.0


class Scheduler:
    def __init__(
        self,
        *,
        store: Store,
        driver: SessionDriver,
        signals: SessionSignals,
        process_id: str,
        timings: DriveSettings,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._driver = driver
        self._signals = signals
        self._process_id = process_id
        self._timings = timings
        self._clock = clock
        self._driving: set[SessionId] = set()
        # Sessions named as having work while this process drove them: claimed again when the
        # drive ends (a turn's end lets go of the lease without looking for a message since).
        self._named_while_driving: set[SessionId] = set()
        self._draining = False
        self._retry_at: dict[SessionId, tuple[float, float]] = {}
        self._idle = anyio.Event()
        # A scan or claim found this process driving all it may: scan again when one ends.
        self._full = False

    @property
    def driving(self) -> frozenset[SessionId]:
        return frozenset(self._driving)

    async def drain(self, grace_s: float) -> bool:
        """Stop taking work and let every driver finish its current step, for `grace_s` at most.

        Returns True when every driver stopped in time; the caller then cancels the rest.
        Unfinished turns stay as committed and resume in the next process.
        """
        self._draining = True
        self._driver.stop_after_current_step()
        self._signals.work_available()
        with anyio.move_on_after(grace_s):
            while self._driving:
                await self._idle.wait()
                self._idle = anyio.Event()
            return True
        logger.warning(
            "shutdown grace of %.1fs ran out with %d session(s) mid-step", grace_s, len(self._driving)
        )
        return False

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            task_status.started()
            named: set[SessionId] = set()
            scan = True
            while not self._draining:
                try:
                    if scan:
                        await self._scan(tg)
                    # Sessions named as having work (given it here, or by another process through
                    # the change feed): claimed at once, without a scan.
                    await self._claim(tg, named)
                except Exception:
                    # A failed scan (a bug, a disk hiccup) must not stop the process; retry next tick.
                    log_pass_failure(logger, "scanning for work")
                named, scan = await self._signals.wait_for_work(self._timings.poll_interval_s)

    async def _scan(self, tg: anyio.abc.TaskGroup) -> None:
        await self._claim(tg, await self._store.sessions_needing_work(self._clock(), SCAN_BATCH))

    async def _claim(self, tg: anyio.abc.TaskGroup, session_ids: Iterable[SessionId]) -> None:
        """Take the leases of those sessions that are free and need work, in one go, and drive
        them; as many as this process may drive: the rest stay free for other processes (and for
        this one's next scan) instead of holding leases while they queue."""
        if self._draining:
            return
        now = self._clock()
        named = dict.fromkeys(session_ids)
        self._named_while_driving.update(s for s in named if s in self._driving)
        wanted = [
            session_id
            for session_id in named
            if session_id not in self._driving
            and (session_id not in self._retry_at or self._retry_at[session_id][0] <= now)
        ]
        room = self._timings.max_driven_sessions - len(self._driving)
        if len(wanted) > room:
            self._full = True
            wanted = wanted[: max(room, 0)]
        if not wanted:
            return
        ttl = self._timings.lease_ttl_s
        if len(wanted) == 1:
            # One session (named by a message or a decision, most often): the claim's transaction
            # reads its first snapshot and starts the turn a message waits for.
            start = self._driver.start_on_claim(wanted[0], now)
            claimed = await self._store.claim_and_decide(
                wanted[0], self._process_id, now, ttl, STEP_VIEW, start.decide, start.after
            )
            leases = {wanted[0]: claimed} if claimed is not None else {}
        else:
            taken = await self._store.try_acquire_leases(wanted, self._process_id, now, ttl)
            leases = {session_id: Claimed(lease, None, None) for session_id, lease in taken.items()}
        for session_id, claim in leases.items():
            self._driving.add(session_id)
            tg.start_soon(self._drive, session_id, claim)

    async def _drive(self, session_id: SessionId, claim: Claimed[StartedTurn | None]) -> None:
        again: bool | None = None  # unknown after a failure: scan
        try:
            again = await self._driver.drive(session_id, claim.lease, claim.snapshot, claim.value)
            self._retry_at.pop(session_id, None)
        except Exception as exc:
            _, pause = self._retry_at.get(session_id, (0.0, self._timings.poll_interval_s))
            pause = min(pause * 2, MAX_RETRY_PAUSE_S)
            self._retry_at[session_id] = (self._clock() + pause, pause)
            if isinstance(exc, StorageUnavailable):
                # The database's condition, not a bug: one line, no traceback.
                logger.warning("driving session %s failed; retrying in %.1fs: %s", session_id, pause, exc)
            else:
                logger.exception("driving session %s failed; retrying in %.1fs", session_id, pause)
        finally:
            self._driving.discard(session_id)
            self._idle.set()
            if session_id in self._named_while_driving:
                self._named_while_driving.discard(session_id)
                again = again if again is None else True
            if again is None or self._full:
                # A failure, or sessions were left for lack of room: look for work again.
                self._full = False
                self._signals.work_available()
            elif again:
                # The session needs a driver again (a message came as its lease was let go).
                self._signals.work_available(session_id)
