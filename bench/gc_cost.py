"""What Python's cyclic garbage collector costs a turn, with and without the freeze that
`parley serve` applies once it is ready (`parley.app.freeze_startup_heap`).

Each variant runs in a process of its own (a freeze cannot be undone cleanly): parley in that
process (parley.testing's `parley_app`, the composition root of `parley serve`, on SQLite in a
temporary folder, the keyless demo model), an in-memory MCP client, `--sessions` sessions and
`--turns` text turns spread over them round robin (one session more for every 900 turns), after
a warm-up. `frozen` calls the same function `parley serve` calls before its first request;
`as-is` does not. `gc.callbacks` time every collection by generation while the turns run.

    .venv/bin/python bench/gc_cost.py                      # both variants, alternated, 3 pairs
    .venv/bin/python bench/gc_cost.py --turns 2000 --sessions 32 --pairs 2

Prints one line a run, then one JSON line with every run. The client's own allocations are in
the count too, the same for both variants: compare the two, not the absolute figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from parley.app import freeze_startup_heap
from parley.testing.app import parley_app
from parley.testing.waiting import call

VARIANTS = ("as-is", "frozen")
WARMUP_TURNS = 5
# A session takes 1,000 turns by default (runtime.max_turns_per_session): more sessions past that.
TURNS_PER_SESSION = 900


@dataclass
class Collections:
    """Every collection of one run: count, total and longest time by generation."""

    count: list[int] = field(default_factory=lambda: [0, 0, 0])
    total_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    longest_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    _started: float = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation, took = info["generation"], time.perf_counter() - self._started
        self.count[generation] += 1
        self.total_s[generation] += took
        self.longest_s[generation] = max(self.longest_s[generation], took)


async def one_run(variant: str, turns: int, sessions: int) -> dict[str, Any]:
    sessions = max(sessions, -(-(turns + WARMUP_TURNS) // TURNS_PER_SESSION))
    async with parley_app() as running, running.mcp() as client:
        ids = []
        for _ in range(sessions):
            started = await call(client, "start_session", agent="demo", message="hello")
            ids.append(started["session_id"])
        for n in range(WARMUP_TURNS):
            await call(client, "send_message", session_id=ids[n % sessions], message="hi")
        if variant == "frozen":
            freeze_startup_heap()
        tracked = len(gc.get_objects())
        collections = Collections()
        gc.callbacks.append(collections)
        cpu = time.process_time()
        try:
            for n in range(turns):
                outcome = await call(client, "send_message", session_id=ids[n % sessions], message="hi")
                if outcome.get("status") != "answered":
                    raise RuntimeError(f"a turn ended {outcome.get('status')!r}")
        finally:
            gc.callbacks.remove(collections)
        cpu_ms = (time.process_time() - cpu) * 1000 / turns
    figures = asdict(collections)
    figures.pop("_started")
    return {
        "variant": variant,
        "turns": turns,
        "sessions": sessions,
        "tracked_objects": tracked,
        "frozen_objects": gc.get_freeze_count(),
        "cpu_ms_per_turn": round(cpu_ms, 3),
        "gc_ms_per_turn": round(sum(collections.total_s) * 1000 / turns, 4),
        "collections": figures,
    }


def run_child(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", variant, "--turns", str(args.turns)]
    command += ["--sessions", str(args.sessions)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.deadline, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {variant} run failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def describe(run: dict[str, Any]) -> str:
    c = run["collections"]
    longest = ", ".join(f"{s * 1000:.1f}" for s in c["longest_s"])
    return (
        f"  {run['variant']:<7} tracked {run['tracked_objects']:>7,} frozen {run['frozen_objects']:>7,}"
        f"  collections {c['count']}  gc {run['gc_ms_per_turn']:.3f} ms/turn"
        f"  longest by generation {longest} ms  cpu {run['cpu_ms_per_turn']:.3f} ms/turn"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=1, help="sessions the turns go round")
    parser.add_argument("--pairs", type=int, default=3, help="as-is/frozen pairs, alternated")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds for each run")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.turns <= 100_000 or not 1 <= args.sessions <= 1_000 or not 1 <= args.pairs <= 20:
        parser.error("--turns 1..100000, --sessions 1..1000, --pairs 1..20")
    if args.child:
        print(json.dumps(anyio.run(one_run, args.child, args.turns, args.sessions)))
        return
    runs = []
    for _ in range(args.pairs):
        for variant in VARIANTS:
            runs.append(run_child(args, variant))
            print(describe(runs[-1]), flush=True)
    print(json.dumps({"turns": args.turns, "sessions": args.sessions, "runs": runs}))


if __name__ == "__main__":
    main()
