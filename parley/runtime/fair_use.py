"""Fair use per principal (`limits:` in parley.yaml): how many of a principal's sessions may run
a turn at once (counted in the database, so the limit holds across replicas), and how many
sessions it may start and messages it may send per minute (counted in this process: behind N
replicas a principal may send up to N times as many). Over a limit, the call is refused with when to try again; other
principals are not affected.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from parley.config.auth import LimitsConfig
from parley.errors import RateLimited
from parley.runtime.access import Principal
from parley.storage.ports import OwnerQueries

WINDOW_S = 60.0
# Principals whose recent messages are remembered at most (the oldest idle ones are forgotten).
MAX_TRACKED = 100_000

# What is counted per minute: new sessions, messages.
Counted = Literal["sessions", "messages"]


class FairUse:
    def __init__(
        self, limits: LimitsConfig, store: OwnerQueries, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._limits = limits
        self._store = store
        self._clock = clock
        # (what, principal) -> when each of the last minute's was admitted.
        self._sent: dict[tuple[Counted, str], deque[float]] = {}

    async def admit(self, who: Principal, *, new_session: bool, message: bool, starts_turn: bool) -> None:
        """Count a call of `who` that starts a session and/or sends a message, or refuse it if
        it goes over a limit; a refused call counts nothing (its minute's budget stays)."""
        limits = self._limits.of(who.id)
        now = self._clock()
        counted: list[tuple[Counted, int | None]] = [
            ("sessions", limits.sessions_per_minute if new_session else None),
            ("messages", limits.messages_per_minute if message else None),
        ]
        for what, limit in counted:
            if limit is not None:
                self._check_rate(who, what, limit, now)
        if message:
            await self.check_turn(who, starts_turn)
        for what, limit in counted:
            if limit is not None:
                self._recent(who, what, now).append(now)

    async def check_turn(self, who: Principal, starts_turn: bool) -> None:
        """Refuse a message that would start one more running turn than `who` may have."""
        limit = self._limits.of(who.id).running_turns
        if limit is None or not starts_turn:
            return
        running = await self._store.count_running(who.id)
        if running >= limit:
            raise RateLimited(
                f"{who.id} has {running} session(s) running a turn, the most this server allows at once "
                f"(limits.running_turns = {limit}). Try again when one of them has answered (get_session with "
                "wait_seconds tells you when), or send this message to a session that is already running, "
                "where it queues.",
                retry_after_s=None,
            )

    def check_message(self, who: Principal) -> None:
        """Count one message of `who`, or refuse it if the minute's budget is spent."""
        limit = self._limits.of(who.id).messages_per_minute
        if limit is None:
            return
        now = self._clock()
        self._check_rate(who, "messages", limit, now)
        self._recent(who, "messages", now).append(now)

    def _recent(self, who: Principal, what: Counted, now: float) -> deque[float]:
        """When `who`'s `what` of the last minute were admitted (older ones forgotten)."""
        key = (what, who.id)
        sent = self._sent.get(key)
        if sent is None:
            if len(self._sent) >= MAX_TRACKED:
                self._forget_idle(now)
            sent = self._sent[key] = deque()
        while sent and sent[0] <= now - WINDOW_S:
            sent.popleft()
        return sent

    def _check_rate(self, who: Principal, what: Counted, limit: int, now: float) -> None:
        sent = self._recent(who, what, now)
        if len(sent) >= limit:
            wait_s = max(1, math.ceil(sent[0] + WINDOW_S - now))
            verb, nothing = (
                ("started", "nothing was started") if what == "sessions" else ("sent", "nothing was sent")
            )
            raise RateLimited(
                f"{who.id} has {verb} {len(sent)} {what} in the last minute, the most this server allows "
                f"(limits.{what}_per_minute = {limit}). Try again in {wait_s} s; {nothing}.",
                retry_after_s=wait_s,
            )

    def _forget_idle(self, now: float) -> None:
        for key in [k for k, times in self._sent.items() if not times or times[-1] <= now - WINDOW_S]:
            del self._sent[key]
