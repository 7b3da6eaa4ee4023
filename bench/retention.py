"""Retention under a steady load: the store's size and the sweep's time with a retention policy
on and off, and whether the sweep delays a running turn.

For each mode ("off": no `retention:` block; "on": ended sessions and events older than --age
seconds, swept every --interval seconds in batches of --batch) the script starts `parley serve
--http` as a subprocess on a fresh SQLite file in a temporary directory, and then, at once:

- **the load**: --rounds rounds of --per-round sessions (default 20 x 500 = 10,000) written
  through the store API directly (parley.storage.sqlite, another process on the same file, as
  the CLI is): each session gets a first message, one turn with a model step of --text
  characters, its events, and is closed; every session is written with the real time, so the
  server's policy sees them age. After each round the script reads the database and -wal file
  sizes and the number of sessions stored.
- **turns through the real server**: one MCP client (the mcp SDK's `Client` over streamable HTTP)
  runs plain-text turns of the demo agent back to back for as long as the load lasts (100 turns a
  session, then it closes the session and starts another); the latency of each `send_message` is
  recorded (p50/p95/max per mode).

At the end it reads the sweep lines of the server's log ("retention removed N session(s) and M
event(s) in B batch(es), the longest X ms") and reports their count, the sessions and events
removed, and the longest batch. The figures of the two modes side by side show whether disk use
plateaus and whether turns got slower while the sweep ran.

    .venv/bin/python bench/retention.py [--rounds 20] [--per-round 500] [--age 8] [--interval 1]

Talks only to 127.0.0.1 and the subprocesses it starts; bounded by --deadline.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import anyio
from _common import (
    add_limit_options,
    base_config,
    connect_read_only,
    db_bytes,
    http_server,
    latency_summary,
    loadavg_1m,
    log_excerpt,
    machine,
    run_and_report,
    stop_server,
    wait_for_url,
    write_config_files,
)
from mcp import Client

from parley.core.ids import new_session_id, new_turn_id
from parley.core.records import ModelStep, QueuedMessageRecord, SessionRecord
from parley.core.transitions import TurnEnd, starting
from parley.runtime.session_steps import SessionSteps
from parley.storage.sqlite import open_sqlite_store

DAY_S = 86_400
SWEEP_LINE = re.compile(
    r"retention removed (\d+) session\(s\) and (\d+) event\(s\) in (\d+) batch\(es\), the longest ([\d.]+) ms"
)
PROCESS = "bench-writer"
# Turns of one session of the turn client before it closes it and starts another.
TURNS_PER_SESSION = 100


async def write_session(steps: SessionSteps, store: Any, text: str) -> None:
    """One finished, closed session, as a server would have left it."""
    now = time.time()
    sid = new_session_id()
    record = SessionRecord.new(sid, agent="demo", owner="local", kind="chat", now=now, title="bench")
    first = QueuedMessageRecord.new(sid, "hello", now=now)
    await store.create_session(starting(record, first), first, now)
    lease = (await store.try_acquire_leases([sid], PROCESS, now, 30.0)).get(sid)
    turn = await steps.start_turn(sid, lease, new_turn_id(), now) if lease is not None else None
    if lease is None or turn is None:
        # The server saw the new session first and runs its turn itself: close it after that.
        await steps.request_close(sid, "local", "done", now)
        return
    step = ModelStep(
        turn_id=turn.id,
        step_no=1,
        assistant={"text": text},
        tool_calls=[],
        input_tokens=10,
        output_tokens=len(text) // 4,
    )
    await steps.commit_model_step(sid, lease, step, now)
    await steps.finish_turn(sid, lease, turn.id, TurnEnd(status="answered", answer=text, error=None), now)
    await store.release_lease(sid, lease)
    await steps.request_close(sid, "local", "done", now)


def stored_sessions(db: Path) -> int:
    conn = connect_read_only(db)
    try:
        return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
    finally:
        conn.close()


async def one_mode(workdir: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    directory = workdir / mode
    directory.mkdir()
    sections: dict[str, Any] = {}
    if mode == "on":
        sections["retention"] = {
            "ended_sessions_after_days": args.age / DAY_S,
            "events_after_days": args.age / DAY_S,
            "interval_s": args.interval,
            "batch_size": args.batch,
        }
    config = write_config_files(directory, base_config(**sections))
    log = directory / "server.log"
    rounds: list[dict[str, Any]] = []
    latencies: list[float] = []
    text = "x" * args.text
    async with http_server(directory, config, log) as process:
        url = await wait_for_url(process, log)
        done = anyio.Event()

        async def turns() -> None:
            async with Client(url) as client:
                sid = ""
                n = 0
                while not done.is_set():
                    n += 1
                    if n % TURNS_PER_SESSION == 1:
                        # A fresh session now and then, the last one closed (so the policy takes it too).
                        if sid:
                            await client.call_tool("close_session", {"session_id": sid})
                        started = await client.call_tool("start_session", {"agent": "demo"})
                        sid = (started.structured_content or {})["session_id"]
                    t0 = time.perf_counter()
                    result = await client.call_tool(
                        "send_message", {"session_id": sid, "message": f"turn {n}"}
                    )
                    latencies.append((time.perf_counter() - t0) * 1000)
                    if result.is_error or (result.structured_content or {}).get("status") != "answered":
                        raise RuntimeError(f"turn {n} did not answer: {result}")

        async def load() -> None:
            async with open_sqlite_store(directory / "parley.db") as store:
                steps = SessionSteps(store)
                for index in range(args.rounds):
                    t0 = time.perf_counter()
                    for _ in range(args.per_round):
                        await write_session(steps, store, text)
                    rounds.append(
                        {
                            "round": index + 1,
                            "written": (index + 1) * args.per_round,
                            "write_s": round(time.perf_counter() - t0, 2),
                            "stored": stored_sessions(directory / "parley.db"),
                            **db_bytes(directory),
                        }
                    )
                    print(f"  [{mode}] round {index + 1}: {rounds[-1]}", flush=True)
            done.set()

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(turns)
            tg.start_soon(load)
        wall_s = time.perf_counter() - started
        stopped = await stop_server(process)
    sweeps = [
        tuple(float(x) for x in m.groups()) for m in SWEEP_LINE.finditer(log.read_text(errors="replace"))
    ]
    return {
        "mode": mode,
        "wall_s": round(wall_s, 1),
        "rounds": rounds,
        "final": rounds[-1] if rounds else None,
        "largest_db_bytes": max((r["db_bytes"] + r["wal_bytes"] for r in rounds), default=0),
        "turns": len(latencies),
        "turn_latency": latency_summary(latencies),
        "sweeps": len(sweeps),
        "swept_sessions": int(sum(s[0] for s in sweeps)),
        "swept_events": int(sum(s[1] for s in sweeps)),
        "sweep_batches": int(sum(s[2] for s in sweeps)),
        "longest_batch_ms": max((s[3] for s in sweeps), default=None),
        "server": stopped,
    }


async def run(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    results = {mode: await one_mode(workdir, mode, args) for mode in ("off", "on")}
    return {
        "machine": machine("sqlite", "mcp"),
        "loadavg_1m": loadavg_1m(),
        "settings": vars(args),
        **results,
    }


def report(result: dict[str, Any]) -> None:
    for mode in ("off", "on"):
        r = result[mode]
        final = r["final"] or {}
        print(
            f"retention {mode}: {final.get('written')} sessions written in {r['wall_s']} s; stored at the end "
            f"{final.get('stored')}; db {final.get('db_bytes', 0) / 1e6:.1f} MB + wal {final.get('wal_bytes', 0) / 1e6:.1f} MB "
            f"(largest {r['largest_db_bytes'] / 1e6:.1f} MB)"
        )
        print(
            f"  turns through the server: {r['turns']}, latency {r['turn_latency']}; sweeps {r['sweeps']}, "
            f"sessions {r['swept_sessions']}, events {r['swept_events']}, batches {r['sweep_batches']}, "
            f"longest batch {r['longest_batch_ms']} ms"
        )
    print(json.dumps(result))


def _logs(workdir: Path) -> str:
    return "\n".join(
        log_excerpt(workdir / mode / "server.log", f"server log ({mode})") for mode in ("off", "on")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=500)
    parser.add_argument(
        "--age", type=float, default=8.0, help="seconds a closed session and an event are kept"
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between sweeps")
    parser.add_argument("--batch", type=int, default=100, help="rows of one kind per sweep transaction")
    parser.add_argument("--text", type=int, default=400, help="characters of each session's answer")
    add_limit_options(parser, 1800.0)
    args = parser.parse_args()
    return run_and_report(lambda workdir: run(workdir, args), args.deadline, _logs, report)


if __name__ == "__main__":
    raise SystemExit(main())
