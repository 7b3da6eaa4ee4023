"""`parley` with every SQL statement it runs written to a file, for bench/profile_turns.py.

    .venv/bin/python bench/sqlite_trace.py TRACE_FILE serve --config parley.yaml

Before parley is imported, `sqlite3.connect` is wrapped so that each connection gets a trace
callback (`Connection.set_trace_callback`) appending each statement SQLite runs, as one line
(newlines folded into spaces), to TRACE_FILE. Everything after TRACE_FILE is parley's own command
line. For measurement only: the file holds the statements with their bound values (messages
included), and the callback costs time on the database thread.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    trace = Path(sys.argv[1]).open("a", encoding="utf-8", buffering=1)  # noqa: SIM115 - for the process
    connect = sqlite3.connect

    def write(statement: str) -> None:
        trace.write(" ".join(statement.split()) + "\n")

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection: sqlite3.Connection = connect(*args, **kwargs)
        connection.set_trace_callback(write)
        return connection

    sqlite3.connect = traced  # type: ignore[assignment]
    # The parley of the repository this script lives in, as `python -m parley` run there would
    # import (Python's path starts at bench/ here, which would fall back on the installed one).
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from parley.cli import main as parley_main  # after the patch: the store looks it up at call time

    return int(parley_main(sys.argv[2:]))


if __name__ == "__main__":
    sys.exit(main())
