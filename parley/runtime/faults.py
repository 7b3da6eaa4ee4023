"""Fault points: named moments of a step where a test may stop or hold the process.

Inert unless the composition root is given armed `FaultPoints` (parley.testing does that;
`parley serve` never does). At the point — and, with a `match`, only when the point's detail
contains it (a tool name, say) — the armed action runs: by default the process kills itself
with SIGKILL, exactly as a crash would, so the crash tests need no timing; an in-process test
may instead hold the step there, or note that it passed.

Points: model_committed (a model step is committed, its tool calls not started),
tool_ran (a tool call returned, its result not committed), interrupt_raised (an approval or
question is stored), turn_finishing (the turn's last step is committed, the turn not ended),
compacting (a summary was made, not stored), plan_approving (execute_plan is about to commit the
approval), plan_approved (the approval is committed, not yet answered).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

POINTS = (
    "model_committed",
    "tool_ran",
    "interrupt_raised",
    "turn_finishing",
    "compacting",
    "plan_approving",
    "plan_approved",
)

# What runs at an armed point: given the point and its detail.
FaultAction = Callable[[str, str], Awaitable[None]]


async def kill_this_process(point: str, detail: str) -> None:
    logger.warning("fault injection: stopping at %s (%s)", point, detail)
    os.kill(os.getpid(), signal.SIGKILL)


class FaultPoints:
    def __init__(
        self, point: str | None = None, match: str | None = None, action: FaultAction = kill_this_process
    ) -> None:
        if point is not None and point not in POINTS:
            raise ValueError(f"unknown fault point '{point}'; known: {', '.join(POINTS)}")
        self._point = point
        self._match = match or None
        self._action = action
        if self._point:
            logger.warning(
                "fault injection armed at %s%s", self._point, f":{self._match}" if self._match else ""
            )

    @classmethod
    def parse(cls, spec: str, action: FaultAction = kill_this_process) -> FaultPoints:
        """`<point>[:<text>]`, as a test names a point on a command line."""
        point, _, match = spec.partition(":")
        return cls(point or None, match or None, action)

    async def hit(self, point: str, detail: str = "") -> None:
        if self._point == point and (self._match is None or self._match in detail):
            await self._action(point, detail)
