"""Python calls and SQLite transactions a turn costs, counted: measures of parley's own work that
the machine's noise does not move.

On this shared VM one run's CPU a turn moves by a quarter from one minute to the next, so a change
of a few percent cannot be told from the noise by timing it. This script counts instead: it runs
parley in this process (parley.testing's `parley_app`, the composition root of `parley serve`, on
SQLite in a temporary folder, the keyless demo model), talks to it with an in-memory MCP client,
and counts every Python and C function call of every thread (`sys.setprofile`) during `--turns`
turns of one session, after a warm-up. The count includes the client's side, which is the same for
any parley revision. The same revision gives the same count within about 0.2 %. Every SQLite
connection also gets a trace callback, and each `BEGIN` it runs is a transaction (the callback's
own two calls a statement are in the count too).

    .venv/bin/python bench/calls_per_turn.py --turns 100
    .venv/bin/python bench/calls_per_turn.py --turns 50 --tool
    .venv/bin/python bench/calls_per_turn.py --client-message-id   # as parley.client, /ui, /v1 send
    PYTHONPATH=/tmp/snap .venv/bin/python bench/calls_per_turn.py   # another revision (a snapshot)

Prints one JSON line: which parley ran, calls and transactions a turn, and the process's CPU a
turn while counted (inflated several times by the counting itself: compare counts, not this).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import threading
import time
from types import FrameType
from typing import Any

import anyio

import parley
from parley.testing.app import parley_app
from parley.testing.waiting import call

TEXT = "hi there"
# The demo model runs the tool a message names (docs/models.md, the demo model).
TOOL = '/tool write_todos {"todos": [{"content": "pack"}]}'
WARMUP = 3


class Counter:
    """Every call and C call of every thread, from when it is installed."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            self.calls += 1

    def install(self) -> None:
        # Before parley starts: threading.setprofile reaches the threads started later (SQLite's).
        sys.setprofile(self)
        threading.setprofile(self)


class Transactions:
    """The BEGINs of every SQLite connection opened from when it is installed (the store looks
    `sqlite3.connect` up when it opens its connections)."""

    def __init__(self) -> None:
        self.begins = 0
        self._connect = sqlite3.connect

    def _seen(self, statement: str) -> None:
        if statement.startswith("BEGIN"):
            self.begins += 1

    def _traced(self, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection: sqlite3.Connection = self._connect(*args, **kwargs)
        connection.set_trace_callback(self._seen)
        return connection

    def install(self) -> None:
        sqlite3.connect = self._traced  # type: ignore[assignment]


async def count(
    turns: int, tool: bool, with_ids: bool, counter: Counter, transactions: Transactions
) -> dict[str, Any]:
    message = TOOL if tool else TEXT
    async with parley_app() as running, running.mcp() as client:
        started = await call(client, "start_session", agent="demo", message="hello")
        session_id = started["session_id"]
        for n in range(WARMUP):
            ids = {"client_message_id": f"warm-{n}"} if with_ids else {}
            await call(client, "send_message", session_id=session_id, message=message, **ids)
        counter.calls, transactions.begins = 0, 0
        cpu = time.process_time()
        for n in range(turns):
            ids = {"client_message_id": f"turn-{n}"} if with_ids else {}
            outcome = await call(client, "send_message", session_id=session_id, message=message, **ids)
            if outcome.get("status") != "answered":
                raise RuntimeError(f"a turn ended {outcome.get('status')!r}: {outcome}")
        return {
            "parley": parley.__file__,
            "turns": turns,
            "tool": tool,
            "client_message_id": with_ids,
            "calls_per_turn": round(counter.calls / turns),
            "transactions_per_turn": round(transactions.begins / turns, 2),
            "counted_cpu_ms_per_turn": round((time.process_time() - cpu) * 1000 / turns, 2),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="turns counted (after a warm-up of 3)")
    parser.add_argument("--tool", action="store_true", help="each turn calls one tool")
    parser.add_argument(
        "--client-message-id", action="store_true", help="each message carries a new client_message_id"
    )
    args = parser.parse_args()
    if not 1 <= args.turns <= 10_000:
        parser.error("--turns must be 1..10000")
    counter, transactions = Counter(), Transactions()
    transactions.install()
    counter.install()
    try:
        figures = anyio.run(count, args.turns, args.tool, args.client_message_id, counter, transactions)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
