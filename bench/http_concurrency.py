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
import math
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import yaml
from anyio.abc import Process
from mcp import Client

AGENT = "demo"
HOST = "127.0.0.1"
# The demo agent's per-agent limit (limits.max_turns) is 1000 turns per session.
MAX_TURNS = 1000
MAX_LEVEL = 256
STARTUP_TIMEOUT_S = 60.0
# SIGTERM drains for up to runtime.shutdown_grace_s (default 10 s); give it a margin.
STOP_TIMEOUT_S = 30.0


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation): the smallest value with >= p% at or below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(values_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values_ms, 50), 2),
        "p95_ms": round(percentile(values_ms, 95), 2),
        "max_ms": round(max(values_ms), 2),
    }


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds, from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) is in parentheses and may hold spaces; split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of the full line
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU time of this benchmark process (all its threads): the clients' side of the work."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (peak resident) of a process, in KiB, from /proc/<pid>/status."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])  # "  123456 kB"
    return {"rss_kib": found["VmRSS"], "hwm_kib": found["VmHWM"]}


def mib(kib: int) -> float:
    return round(kib / 1024, 1)


def write_config(directory: Path) -> Path:
    """parley.yaml with a fresh database and the default runtime settings (nothing overridden)."""
    config = {"storage": {"path": "parley.db"}, "runtime": {}}
    path = directory / "parley.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def start_server(directory: Path, config: Path, log: Path) -> Process:
    """Spawn the server ourselves so its pid is known; stdout and stderr go to a log file."""
    command = [sys.executable, "-m", "parley", "serve", "--config", str(config)]
    command += ["--http", "--host", HOST, "--port", "0", "--log-level", "INFO"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PARLEY_DB", None)  # the database is the one in parley.yaml
    env.pop("PARLEY_CONFIG", None)
    with log.open("ab") as sink:
        return await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, cwd=directory, env=env
        )


async def wait_for_url(process: Process, log: Path) -> str:
    """The URL from the server's "listening on http://HOST:PORT/mcp" log line."""
    with anyio.fail_after(STARTUP_TIMEOUT_S):
        while True:
            for line in (await anyio.Path(log).read_text(errors="replace")).splitlines():
                if "listening on http://" in line:
                    url = line.split("listening on ", 1)[1].strip()
                    if urlsplit(url).hostname != HOST:
                        raise RuntimeError(f"the server listens on {url}, not on {HOST}")
                    return url
            if process.returncode is not None:
                raise RuntimeError(f"the server exited during start-up with code {process.returncode}")
            await anyio.sleep(0.02)


async def healthz(url: str) -> dict[str, Any]:
    """GET /healthz next to /mcp (loopback only, checked in wait_for_url)."""
    health_url = url.removesuffix("/mcp") + "/healthz"

    def get() -> dict[str, Any]:
        with urllib.request.urlopen(health_url, timeout=10) as response:
            return dict(json.load(response))

    return await anyio.to_thread.run_sync(get)


async def stop_server(process: Process) -> tuple[int, float, bool]:
    """SIGTERM, then wait; SIGKILL only if it does not exit in time. (exit code, seconds, killed)."""
    started = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    killed = False
    with anyio.move_on_after(STOP_TIMEOUT_S):
        await process.wait()
    if process.returncode is None:
        killed = True
        process.kill()
        await process.wait()
    assert process.returncode is not None
    return process.returncode, time.perf_counter() - started, killed


async def call(client: Client, timeout_s: float, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{tool} failed: {text}")
    return dict(result.structured_content)


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
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    process = await start_server(workdir, config, log)
    try:
        url = await wait_for_url(process, log)
        startup_s = time.perf_counter() - started
        idle_health = await healthz(url)
        idle_memory = memory_kib(process.pid)

        setup = await measure_setup(url, setup_calls, call_timeout_s)
        results = []
        for level in levels:
            results.append(await measure_level(url, process.pid, level, turns, call_timeout_s))
        after_memory = memory_kib(process.pid)  # every client has disconnected

        exit_code, stop_s, killed = await stop_server(process)
    finally:
        if process.returncode is None:  # failure or deadline: do not leave the server behind
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.wait()

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
        "exit_code": exit_code,
        "stop_s": round(stop_s, 3),
        "killed_after_sigterm": killed,
        "total_wall_s": round(time.perf_counter() - started, 3),
        # 1-minute load average: on a shared machine, other work competes for the same cores.
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "nproc": len(os.sched_getaffinity(0)),
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
    killed = " (killed: no exit after SIGTERM)" if r["killed_after_sigterm"] else ""
    print(f"  SIGTERM -> exit code {r['exit_code']} after {r['stop_s']:.3f} s{killed}")
    print(f"  total wall time {r['total_wall_s']:.3f} s   machine nproc {r['nproc']}, Python {r['python']}")
    print(f"  1-minute load average before {r['loadavg_1m_before']}, after {r['loadavg_1m_after']}")
    print(json.dumps(r, sort_keys=True))


def server_log_excerpt(log: Path) -> str:
    """The server's first logged error (often the cause) and the end of its log."""
    if not log.exists():
        return "(no server log)"
    text = log.read_text(errors="replace")
    first = text.find(" ERROR ")
    head = "" if first < 0 else f"--- server log (first error) ---\n{text[first : first + 3000]}\n"
    return f"{head}--- server log (tail) ---\n{text[-3000:]}"


def describe(exc: BaseException) -> str:
    """The leaf errors of an exception group (a failed caller task), else the error itself."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    return repr(exc)


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not levels or not all(1 <= level <= MAX_LEVEL for level in levels):
        raise argparse.ArgumentTypeError(f"levels must be 1..{MAX_LEVEL}, e.g. 1,8,32")
    return levels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--levels", type=parse_levels, default=[1, 8, 32], help="concurrent sessions per level (1,8,32)"
    )
    parser.add_argument("--turns", type=int, default=30, help=f"turns per session (1..{MAX_TURNS})")
    parser.add_argument("--setup-calls", type=int, default=50, help="start_session calls for setup time")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds the whole run may take")
    parser.add_argument("--call-timeout", type=float, default=60.0, help="seconds one tool call may take")
    args = parser.parse_args()
    if not 1 <= args.turns <= MAX_TURNS:
        parser.error(f"--turns must be 1..{MAX_TURNS} (the demo agent's turns per session)")
    if args.setup_calls < 1:
        parser.error("--setup-calls must be at least 1")
    if not Path("/proc/self/status").exists():
        parser.error("this benchmark reads /proc/<pid>/status and needs Linux")

    with tempfile.TemporaryDirectory(prefix="parley-bench-") as tmp:
        workdir = Path(tmp)

        async def bounded() -> dict[str, Any]:
            with anyio.fail_after(args.deadline):
                return await run(args.levels, args.turns, args.setup_calls, args.call_timeout, workdir)

        try:
            result = anyio.run(bounded)
        except TimeoutError:
            print(
                f"benchmark failed: the --deadline of {args.deadline} s passed\n"
                f"{server_log_excerpt(workdir / 'server.log')}",
                file=sys.stderr,
            )
            return 1
        except Exception as exc:
            print(
                f"benchmark failed: {describe(exc)}\n{server_log_excerpt(workdir / 'server.log')}",
                file=sys.stderr,
            )
            return 1
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
