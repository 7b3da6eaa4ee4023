"""Test-only fault injection: stop the process at a named point of a step.

Inert unless the server was started with PARLEY_FAULT=<point>[:<text>] (read once, by
config.py). At the point — and, with `:<text>`, only when the point's detail contains the
text (a tool name, say) — the process kills itself with SIGKILL, exactly as a crash would,
so the crash tests need no timing.

Points: model_committed (a model step is committed, its tool calls not started),
tool_ran (a tool call returned, its result not committed), interrupt_raised (an approval or
question is stored), turn_finishing (the turn's last step is committed, the turn not ended),
compacting (a summary was made, not stored).
"""

from __future__ import annotations

import logging
import os
import signal

logger = logging.getLogger(__name__)

POINTS = ("model_committed", "tool_ran", "interrupt_raised", "turn_finishing", "compacting")


class FaultPoints:
    def __init__(self, spec: str | None) -> None:
        point, _, match = (spec or "").partition(":")
        if point and point not in POINTS:
            raise ValueError(f"PARLEY_FAULT: unknown point '{point}'; known: {', '.join(POINTS)}")
        self._point = point or None
        self._match = match or None
        if self._point:
            logger.warning(
                "fault injection armed at %s%s", self._point, f":{self._match}" if self._match else ""
            )

    def hit(self, point: str, detail: str = "") -> None:
        if self._point == point and (self._match is None or self._match in detail):
            logger.warning("fault injection: stopping at %s (%s)", point, detail)
            os.kill(os.getpid(), signal.SIGKILL)
