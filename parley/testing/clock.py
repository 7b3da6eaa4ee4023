"""A clock a test moves by hand, for timers, deadlines and retention without waiting them out."""

from __future__ import annotations

import time


class ManualClock:
    """Wall-clock seconds that stand still until `advance` moves them (parley_app's `clock=`;
    `ParleyUnderTest.advance` also wakes the scheduler, so a timer now due fires at once)."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock moves forward: give a positive number of seconds")
        self._now += seconds
