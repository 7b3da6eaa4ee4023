"""The first turn of a new session, parley against the floor (bench/floor_server.py) in one run.

A new session is what a client pays before its first answer: over streamable HTTP a fresh MCP
client session (`initialize`, then `tools/list`, which the SDK's client sends to check results
against the output schemas, then `start_session` with a message and its answer; then the
client's DELETE of its transport session; `--mode auto` uses the SDK's `server/discover` instead), over stdio a new session on a connection already
open (`start_session` with a message and its answer; a stdio connection is one process, so a
fresh MCP session there is a new process, which `side_by_side.py` times as its start-up).

Both servers run as side_by_side.py starts them (its `Target`: parley on a fresh SQLite file,
the floor in memory) with one fake OpenAI-compatible model (bench/fake_openai.py) beside them.
parley's agent is the built-in `demo` (no model call; `--parley-agent plain` uses the fake model
as the floor does); the floor's is `plain` (one model call). For each transport and each level N
of `--levels` (default 1,32), the floor runs first, then parley, each on a fresh process:

- one warm-up new session, untimed (the server's own first use: lazy imports, the first query);
- rounds of N new sessions started together, as many as make `--sessions` (default 40) at the
  least; each is timed from its start to its answer (an HTTP client's
  close, its DELETE, is timed apart: close_p50_ms); p50/p95/max over every session of every round;
- server CPU per new session: utime+stime of the server's process tree over the rounds, divided
  by the number of sessions; and the client's (this process's CPU time over the rounds, divided
  the same way): the SDK's client parses the tool listing and, at a tool's first call in a
  client session, checks its output schema against the JSON Schema metaschema.

`--repeat R` runs it all R times, floor and parley alternating, and reports each figure's median.
Prints a table (floor, parley, ratio) and then one JSON line.

    .venv/bin/python bench/session_setup.py --repeat 3            # about 2 minutes
    .venv/bin/python bench/session_setup.py --levels 1 --sessions 20 --transports http

The script talks only to 127.0.0.1 and to the processes it starts, stops by itself, and is
bounded by --deadline (the whole run) and --call-timeout (each tool call).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from _common import (
    add_limit_options,
    base_config,
    call,
    latency_summary,
    loadavg_1m,
    own_cpu_seconds,
    parse_level_list,
    require_linux,
    run_and_report,
    run_figures,
    stop_process,
    write_config_files,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from side_by_side import (
    INSTRUCTIONS,
    KEY_ENV,
    MODEL,
    PLAIN_AGENT,
    SERVERS,
    Target,
    check_turn,
    fake_model,
    git_commit,
    http_process,
    median_of,
    read_pid,
    reap,
    run_logs,
    stdio_parameters,
    tree_cpu_seconds,
    tree_memory,
)

from parley.sdk_compat import create_mcp_http_client

MAX_LEVEL = 128


def check_demo(outcome: dict[str, Any], message: str, where: str) -> str:
    """The demo agent's answer to the first message of a session."""
    expected = f"You said: {message} (message 1 of this session)"
    if outcome.get("status") != "answered" or outcome.get("answer") != expected:
        raise RuntimeError(f"{where}: {outcome.get('status')!r}, answer {outcome.get('answer')!r}")
    return str(outcome["session_id"])


def agent_of(target: Target, args: argparse.Namespace) -> str:
    return str(args.parley_agent) if target.name == "parley" else PLAIN_AGENT


async def first_turn(client: Client, target: Target, args: argparse.Namespace, message: str) -> None:
    """start_session with a message, and its answer checked."""
    agent = agent_of(target, args)
    outcome = await call(client, args.call_timeout, "start_session", agent=agent, message=message)
    if agent == "demo":
        check_demo(outcome, message, message)
    else:
        check_turn(outcome, None, message, message)


async def rounds(
    new_session: Callable[[str, list[float]], Awaitable[None]], pid: int, level: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Rounds of `level` new sessions started together: latency and CPU per session. A session
    appends the time of its answer to the list it is given (perf_counter)."""
    await new_session("warm up", [])
    latencies: list[float] = []
    closes: list[float] = []

    async def timed(message: str) -> None:
        t0 = time.perf_counter()
        answered: list[float] = []
        await new_session(message, answered)
        latencies.append((answered[0] - t0) * 1000)
        closes.append((time.perf_counter() - answered[0]) * 1000)

    cpu0, wall0, client0 = tree_cpu_seconds(pid), time.perf_counter(), own_cpu_seconds()
    for r in range(max(1, -(-args.sessions // level))):
        async with anyio.create_task_group() as tg:
            for i in range(level):
                tg.start_soon(timed, f"round {r} session {i} of {level}")
    wall_s, cpu_s = time.perf_counter() - wall0, tree_cpu_seconds(pid) - cpu0
    client_s = own_cpu_seconds() - client0
    count = len(latencies)
    return {
        "level": level,
        "sessions": count,
        **latency_summary(latencies),
        "close_p50_ms": latency_summary(closes)["p50_ms"],
        "sessions_per_s": round(count / wall_s, 1),
        "cpu_ms_per_session": round(cpu_s / count * 1000, 2),
        "client_cpu_ms_per_session": round(client_s / count * 1000, 2),
        "server_cpu_share": round(cpu_s / wall_s, 2),
    }


async def measure_http(target: Target, args: argparse.Namespace, level: int) -> dict[str, Any]:
    target.workdir.mkdir(parents=True, exist_ok=True)
    async with (
        http_process(target, target.workdir / "server.log") as (process, url),
        create_mcp_http_client() as http,
    ):

        async def new_session(message: str, answered: list[float]) -> None:
            # initialize ... DELETE of the transport session, on one shared HTTP client (a new
            # httpx client a session costs the client ~20 ms of CPU: its TLS context)
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode=args.mode) as client:
                await first_turn(client, target, args, message)
                answered.append(time.perf_counter())

        result = await rounds(new_session, process.pid, level, args)
        result["rss_mib"] = tree_memory(process.pid)["rss_mib"]
        pids = tree_memory(process.pid)["tree"]
        await stop_process(process)
    await reap(pids)
    return result


async def measure_stdio(target: Target, args: argparse.Namespace, level: int) -> dict[str, Any]:
    target.workdir.mkdir(parents=True, exist_ok=True)
    pid_file, log = target.workdir / "stdio.pid", target.workdir / "server.log"
    async with Client(stdio_parameters(target, pid_file, log)) as client:
        pid = read_pid(pid_file, target.marker)

        async def new_session(message: str, answered: list[float]) -> None:
            await first_turn(client, target, args, message)
            answered.append(time.perf_counter())

        result = await rounds(new_session, pid, level, args)
        memory = tree_memory(pid)
        result["rss_mib"] = memory["rss_mib"]
    await reap(memory["tree"])
    return result


def prepare(target: Target) -> Target:
    """parley's configuration without the fixture tool server side_by_side.py configures (its
    start would land in the measured rounds): the `plain` agent on the fake model, and `demo`."""
    target.workdir.mkdir(parents=True, exist_ok=True)
    if target.name == "parley":
        model = {"provider": "openai", "name": MODEL, "base_url": target.model_url, "api_key_env": KEY_ENV}
        plain = {
            "name": PLAIN_AGENT,
            "description": "No tools.",
            "instructions": INSTRUCTIONS,
            "model": model,
        }
        write_config_files(target.workdir, base_config(), [plain])
    return target


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_before = loadavg_1m()
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    async with fake_model(workdir, 0.0) as (model_url, model_pid):
        for repeat in range(1, args.repeat + 1):
            results: dict[str, Any] = {name: {} for name in SERVERS}
            for transport in args.transports:
                for level in args.levels:
                    for name in SERVERS:
                        target = Target(
                            name, workdir / f"{name}-{transport}-{level}-{repeat}", model_url, model_pid
                        )
                        measure = measure_stdio if transport == "stdio" else measure_http
                        print(
                            f"  ... {transport} N={level}: {name} ({repeat}/{args.repeat})", file=sys.stderr
                        )
                        results[name][f"{transport}_{level}"] = await measure(target, args, level)
            runs.append(results)
    return {
        "options": {
            "levels": args.levels,
            "sessions": args.sessions,
            "transports": args.transports,
            "parley_agent": args.parley_agent,
            "mode": args.mode,
            "repeat": args.repeat,
        },
        "servers": median_of(runs),
        "commit": git_commit(),
        **run_figures(started, load_before, "sqlite", "mcp", "pythonpath"),
    }


def report(r: dict[str, Any]) -> None:
    o = r["options"]
    print(
        f"new sessions, parley ({o['parley_agent']}) vs floor (plain): levels {o['levels']}, "
        f"{o['sessions']}+ sessions each; commit {r['commit']}; medians of {o['repeat']} runs"
    )
    header = f"  {'figure':<40} {'floor':>9} {'parley':>9} {'ratio':>6}"
    print(header + "\n  " + "-" * (len(header) - 2))
    floor, parley = r["servers"]["floor"], r["servers"]["parley"]
    for key in floor:
        for figure, unit in (
            ("p50_ms", "ms"),
            ("p95_ms", "ms"),
            ("close_p50_ms", "ms"),
            ("cpu_ms_per_session", "ms"),
            ("client_cpu_ms_per_session", "ms"),
            ("rss_mib", "MiB"),
        ):
            f, p = floor[key][figure], parley[key][figure]
            label = f"{key.replace('_', ' N=')} {figure.removesuffix('_ms')} ({unit})"
            if f is not None and p is not None:
                print(f"  {label:<40} {f:>9g} {p:>9g} {p / f if f else 0:>6.2f}")
    print(
        f"  load average {r['loadavg_1m_before']} -> {r['loadavg_1m_after']}, nproc {r['nproc']}, "
        f"total {r['total_wall_s']} s"
    )
    print(json.dumps(r, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--levels",
        type=lambda text: parse_level_list(text, MAX_LEVEL, "1,32"),
        default=[1, 32],
        help="new sessions started together (default 1,32)",
    )
    parser.add_argument(
        "--sessions", type=int, default=40, help="new sessions per level at the least, in rounds of N (40)"
    )
    parser.add_argument(
        "--transports",
        type=lambda text: [t for t in text.split(",") if t],
        default=["stdio", "http"],
        help="stdio,http (default both)",
    )
    parser.add_argument(
        "--mode",
        choices=["legacy", "auto"],
        default="legacy",
        help="the HTTP client's handshake: legacy (initialize and a transport session, as most clients "
        "do today; the default) or auto (the SDK's default: server/discover, no transport session)",
    )
    parser.add_argument("--parley-agent", default="demo", help="parley's agent: demo (default) or plain")
    parser.add_argument("--repeat", type=int, default=1, help="alternated runs; each figure is their median")
    add_limit_options(parser, 1200.0)
    args = parser.parse_args()
    if not 1 <= args.sessions <= 200 or not 1 <= args.repeat <= 9:
        parser.error("--sessions must be 1..200 and --repeat 1..9")
    if set(args.transports) - {"stdio", "http"} or not args.transports:
        parser.error("--transports takes stdio, http or both")
    if args.parley_agent not in ("demo", PLAIN_AGENT):
        parser.error("--parley-agent takes demo or plain")
    require_linux(parser, "stat")
    return run_and_report(lambda workdir: run(args, workdir), args.deadline, run_logs, report)


if __name__ == "__main__":
    sys.exit(main())
