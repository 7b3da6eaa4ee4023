"""Concurrent sessions over MCP streamable HTTP: setup time, throughput, turn latency, server RSS.

Starts `parley serve --http --port 0` as a subprocess on a fresh SQLite file in a temporary
directory (default runtime settings) and connects with the mcp SDK's `Client(url)` (default
mode), one `Client` per simulated caller. It measures:

- new-session setup: `start_session(agent="demo")` without a message, N calls back to back;
- for each concurrency level C (default 1, 8, 32): C callers, each with its own `Client` and its
  own session, send plain-text turns back to back (`send_message`, waiting for each answer) for
  a fixed number of turns. It reports turns per second (total turns / wall time) and p50/p95 of
  the per-turn latency, and checks every answer;
- the server's resident memory (VmRSS from /proc/<pid>/status) at idle after start-up and at the
  end of every level, while that level's clients are still connected.

Prints readable lines, then one final JSON line with every figure.

    .venv/bin/python bench/http_concurrency.py [--levels 1,8,32] [--turns 30] [--deadline 600]

The script talks only to 127.0.0.1 and to the subprocess it starts, stops by itself, and is
bounded by --deadline (the whole run) and --call-timeout (each tool call). At the end it stops
the server with SIGTERM and reports its exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _common import (
    HOST,
    add_limit_options,
    base_config,
    call,
    cpu_seconds,
    healthz,
    http_server,
    latency_summary,
    loadavg_1m,
    memory_kib,
    mib,
    own_cpu_seconds,
    parse_level_list,
    percentile,
    require_linux,
    run_and_report,
    run_figures,
    server_log_excerpt,
    sigterm_line,
    stop_server,
    wait_for_url,
    write_config_files,
)
from mcp import Client

AGENT = "demo"
# The demo agent's per-agent limit (limits.max_turns) is 1000 turns per session.
MAX_TURNS = 1000
MAX_LEVEL = 256


def write_config(directory: Path) -> Path:
    """parley.yaml with a fresh database and the default runtime settings (nothing overridden)."""
    return write_config_files(directory, base_config())


def check_new_session(outcome: dict[str, Any]) -> str:
    if outcome.get("status") != "idle" or not outcome.get("session_id"):
        raise RuntimeError(f"start_session without a message: unexpected outcome {outcome!r}")
    return str(outcome["session_id"])


def check_answer(outcome: dict[str, Any], session_id: str, text: str, turn: int) -> None:
    """The answer must be this session's, answered, and quote this caller's own text and turn."""
    where = f"session {session_id} turn {turn}"
    if outcome.get("session_id") != session_id:
        raise RuntimeError(f"{where}: the outcome is for session {outcome.get('session_id')!r}")
    if outcome.get("status") != "answered":
        raise RuntimeError(f"{where}: status {outcome.get('status')!r}, error {outcome.get('error')!r}")
    expected = f"You said: {text} (message {turn} of this session)"
    if outcome.get("answer") != expected:
        raise RuntimeError(f"{where}: answer {outcome.get('answer')!r}, expected {expected!r}")


async def measure_setup(url: str, calls: int, call_timeout_s: float) -> dict[str, Any]:
    """`start_session` without a message, `calls` times back to back on one client."""
    latencies_ms: list[float] = []
    async with Client(url) as client:
        for _ in range(calls):
            t0 = time.perf_counter()
            outcome = await call(client, call_timeout_s, "start_session", agent=AGENT)
            latencies_ms.append((time.perf_counter() - t0) * 1000)
            check_new_session(outcome)
    return {"calls": calls, **latency_summary(latencies_ms)}


async def measure_level(url: str, pid: int, level: int, turns: int, call_timeout_s: float) -> dict[str, Any]:
    """`level` callers, each with its own Client and session, send `turns` turns back to back.

    Connecting and creating the sessions happen before the clock starts; all callers then start
    together, and the wall time ends when the last caller has its last answer. Memory is read at
    that moment, with every client still connected.
    """
    connect_ms: list[float] = []
    latencies_ms: list[float] = []
    ready, go, finished, release = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()
    counts = {"ready": 0, "finished": 0}
    marks: dict[str, float] = {}

    async def caller(index: int) -> None:
        t0 = time.perf_counter()
        async with Client(url) as client:
            connect_ms.append((time.perf_counter() - t0) * 1000)
            session_id = check_new_session(await call(client, call_timeout_s, "start_session", agent=AGENT))
            counts["ready"] += 1
            if counts["ready"] == level:
                ready.set()
            await go.wait()
            for turn in range(1, turns + 1):
                text = f"caller {index} of {level}, turn {turn}"
                t1 = time.perf_counter()
                try:
                    outcome = await call(
                        client, call_timeout_s, "send_message", session_id=session_id, message=text
                    )
                except Exception as exc:
                    raise RuntimeError(f"level {level}, caller {index}, turn {turn}: {exc}") from exc
                latencies_ms.append((time.perf_counter() - t1) * 1000)
                check_answer(outcome, session_id, text, turn)
            counts["finished"] += 1
            if counts["finished"] == level:
                marks["end"] = time.perf_counter()
                finished.set()
            await release.wait()  # keep the connection open until memory has been read

    async with anyio.create_task_group() as tg:
        for index in range(level):
            tg.start_soon(caller, index)
        await ready.wait()
        server_cpu_before, client_cpu_before = cpu_seconds(pid), own_cpu_seconds()
        start = time.perf_counter()
        go.set()
        await finished.wait()
        wall_s = marks["end"] - start
        server_cpu_s = cpu_seconds(pid) - server_cpu_before
        client_cpu_s = own_cpu_seconds() - client_cpu_before
        memory = memory_kib(pid)
        health = await healthz(url)
        release.set()

    total = level * turns
    if len(latencies_ms) != total:
        raise RuntimeError(f"level {level}: {len(latencies_ms)} answers checked, expected {total}")
    return {
        "level": level,
        "turns_per_session": turns,
        "turns": total,
        "wall_s": round(wall_s, 3),
        "turns_per_s": round(total / wall_s, 1),
        **latency_summary(latencies_ms),
        "connect_p50_ms": round(percentile(connect_ms, 50), 2),
        "connect_max_ms": round(max(connect_ms), 2),
        "server_cpu_s": round(server_cpu_s, 3),
        "server_cpu_ms_per_turn": round(server_cpu_s / total * 1000, 2),
        "server_cpu_share": round(server_cpu_s / wall_s, 2),
        "client_cpu_s": round(client_cpu_s, 3),
        "server_rss_mib": mib(memory["rss_kib"]),
        "server_hwm_mib": mib(memory["hwm_kib"]),
        "healthz_running_turns": health.get("running_turns"),
    }


async def run(
    levels: list[int], turns: int, setup_calls: int, call_timeout_s: float, workdir: Path
) -> dict[str, Any]:
    config = write_config(workdir)
    log = workdir / "server.log"
    load_before = loadavg_1m()
    started = time.perf_counter()
    async with http_server(workdir, config, log) as process:
        url = await wait_for_url(process, log)
        startup_s = time.perf_counter() - started
        idle_health = await healthz(url)
        idle_memory = memory_kib(process.pid)

        setup = await measure_setup(url, setup_calls, call_timeout_s)
        results = []
        for level in levels:
            results.append(await measure_level(url, process.pid, level, turns, call_timeout_s))
        after_memory = memory_kib(process.pid)  # every client has disconnected

        stopped = await stop_server(process)

    return {
        "agent": AGENT,
        "url_host": HOST,
        "startup_s": round(startup_s, 3),
        "idle_healthz": idle_health,
        "idle_rss_mib": mib(idle_memory["rss_kib"]),
        "setup": setup,
        "levels": results,
        "after_clients_rss_mib": mib(after_memory["rss_kib"]),
        "peak_rss_mib": mib(after_memory["hwm_kib"]),
        **stopped,
        **run_figures(started, load_before),
    }


def report(r: dict[str, Any]) -> None:
    print(f"parley HTTP concurrency: '{r['agent']}' agent over MCP streamable HTTP on {r['url_host']}")
    print(f"  server start until listening  {r['startup_s']:.3f} s")
    print(f"  server RSS at idle            {r['idle_rss_mib']:.1f} MiB   healthz {r['idle_healthz']}")
    s = r["setup"]
    print(
        f"  new session (start_session, no message) x{s['calls']}:"
        f"  p50 {s['p50_ms']:.2f} ms   p95 {s['p95_ms']:.2f} ms   max {s['max_ms']:.2f} ms"
    )
    for lv in r["levels"]:
        print(
            f"  {lv['level']:>3} sessions x {lv['turns_per_session']} turns:"
            f"  {lv['turns_per_s']:7.1f} turns/s   p50 {lv['p50_ms']:8.2f} ms   p95 {lv['p95_ms']:8.2f} ms"
            f"   max {lv['max_ms']:8.2f} ms   wall {lv['wall_s']:.3f} s"
        )
        print(
            f"        server CPU {lv['server_cpu_s']:.3f} s ({lv['server_cpu_ms_per_turn']:.2f} ms/turn,"
            f" {lv['server_cpu_share']:.2f} of one core)   client CPU {lv['client_cpu_s']:.3f} s"
            f"   connect p50 {lv['connect_p50_ms']:.1f} ms   server RSS {lv['server_rss_mib']:.1f} MiB"
            f"   healthz running_turns {lv['healthz_running_turns']}"
        )
    print(
        f"  all answers checked: answered, own text, message count 1..{r['levels'][-1]['turns_per_session']}"
    )
    print(
        f"  server RSS after the clients left {r['after_clients_rss_mib']:.1f} MiB,"
        f" peak {r['peak_rss_mib']:.1f} MiB"
    )
    print(f"  {sigterm_line(r)}")
    print(f"  total wall time {r['total_wall_s']:.3f} s   machine nproc {r['nproc']}, Python {r['python']}")
    print(f"  1-minute load average before {r['loadavg_1m_before']}, after {r['loadavg_1m_after']}")
    print(json.dumps(r, sort_keys=True))


def parse_levels(text: str) -> list[int]:
    return parse_level_list(text, MAX_LEVEL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--levels", type=parse_levels, default=[1, 8, 32], help="concurrent sessions per level (1,8,32)"
    )
    parser.add_argument("--turns", type=int, default=30, help=f"turns per session (1..{MAX_TURNS})")
    parser.add_argument("--setup-calls", type=int, default=50, help="start_session calls for setup time")
    add_limit_options(parser, 600.0)
    args = parser.parse_args()
    if not 1 <= args.turns <= MAX_TURNS:
        parser.error(f"--turns must be 1..{MAX_TURNS} (the demo agent's turns per session)")
    if args.setup_calls < 1:
        parser.error("--setup-calls must be at least 1")
    require_linux(parser)

    return run_and_report(
        lambda workdir: run(args.levels, args.turns, args.setup_calls, args.call_timeout, workdir),
        args.deadline,
        server_log_excerpt,
        report,
    )


if __name__ == "__main__":
    sys.exit(main())
