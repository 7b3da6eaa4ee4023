"""`python -m parley.testing.serve [--fault POINT[:TEXT]] serve ...`: the `parley` command line
with fault points armed, for crash tests that need a real process to die at a named point.

`parley serve` itself never arms one, whatever its environment. At the point (with `:TEXT`, only
when the point's detail contains TEXT, such as a tool name) the process kills itself with
SIGKILL, as a crash would. Points: model_committed, tool_ran, interrupt_raised, turn_finishing,
compacting (see parley/runtime/faults.py).
"""

from __future__ import annotations

import argparse

from parley.app import Seams
from parley.cli import exit_now
from parley.cli import main as parley_main
from parley.runtime.faults import POINTS, FaultPoints


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m parley.testing.serve",
        description="parley's command line with a fault point armed (tests only)",
    )
    parser.add_argument("--fault", help=f"POINT[:TEXT], POINT one of {', '.join(POINTS)}")
    known, rest = parser.parse_known_args(argv)
    try:
        faults = FaultPoints.parse(known.fault) if known.fault else FaultPoints()
    except ValueError as exc:
        parser.error(str(exc))
    return parley_main(rest, seams=Seams(faults=faults))


if __name__ == "__main__":
    exit_now(main())
