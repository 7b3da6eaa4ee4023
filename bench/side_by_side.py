"""parley (SQLite) against the floor (bench/floor_server.py) in one run: same client, same fake
model, same downstream tool server; prints the ratios and whether parley meets its targets.

One fake OpenAI-compatible model (bench/fake_openai.py, its own process on 127.0.0.1) serves both
servers. parley's agent uses it streamed (its default); the floor calls it non-streamed. Both use
the tests' fixture MCP server over stdio as the one tool source (`fixture__read_thing`, a read).
Every client is the mcp SDK's `Client` in its default mode. For each transport the floor runs
first, then parley, each on a fresh process (and parley on a fresh database):

- **stdio**, one client: the first turn after start (`start_session` with a message, right after
  the handshake, to an agent without tools), then the first turn of the agent with tools (it
  starts the tool server and lists its tools); one session of `--turns` text turns (p50 of all
  turns, of the first 20 and of the last 20; server CPU per turn, and this process's: the SDK
  client's share of a turn); one session of `--tool-turns` turns that each call the tool once
  (p50, CPU per turn).
- **streamable HTTP**, for each level C of `--concurrency`: C clients connect, then all start
  together; each starts a new session with a message (the first turn of a new session, timed; at
  C = 1, nine more sessions follow one after another, so that figure is a p50 of ten) and
  sends `--http-turns` - 1 more text turns back to back. Turns/s is C x `--http-turns` over the
  wall time; RSS is read at the end of the level with every client still connected. Before the
  first level, one warm-up session of two turns starts the tool server.

"Server CPU" is utime+stime of the server's whole process tree read from /proc (the server, its
downstream fixture server, and any reaped children), over the span of the measured turns. RSS
is the server process's own VmRSS (the tree's sum is printed too). Every answer is checked.

Prints a table (floor, parley, parley/floor, target, PASS/MISS), then one JSON line. The targets
are issue #34's ([6/11] "Close to the floor"); the first turns over stdio have none now.

    .venv/bin/python bench/side_by_side.py                      # everything (~5 min on 2 cores)
    .venv/bin/python bench/side_by_side.py --quick              # a smaller run (~1 min)
    .venv/bin/python bench/side_by_side.py --concurrency 1,8,32,128 --turns 300 --deadline 1800

The script talks only to 127.0.0.1 and to the processes it starts, stops by itself, and is
bounded by --deadline (the whole run) and --call-timeout (each tool call).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
from _common import (
    HOST,
    REPO,
    STARTUP_TIMEOUT_S,
    add_limit_options,
    base_config,
    call,
    cpu_seconds,
    db_bytes,
    fixture_over_stdio,
    latency_summary,
    loadavg_1m,
    log_excerpt,
    mib,
    own_cpu_seconds,
    parent_pid,
    parse_level_list,
    percentile,
    proc_status,
    require_linux,
    run_and_report,
    run_figures,
    stop_process,
    write_config_files,
)
from anyio.abc import Process
from mcp import Client, StdioServerParameters

BENCH = Path(__file__).resolve().parent
AGENT = "bench"  # uses the fixture tool server
PLAIN_AGENT = "plain"  # the same model, no tools
INSTRUCTIONS = "You are a benchmark agent."
MODEL = "bench-model"
KEY_ENV = "BENCH_FAKE_KEY"
KEY = "bench-dummy-key"  # not a secret: the fake model accepts anything
TOOL_MESSAGE = "please use the tool"
TOOL_ANSWER = "done: thing x is fine"
TOOL_NAME = "fixture__read_thing"
WINDOW = 20
MAX_TURNS = 1000  # parley's limits.max_turns per session
# New sessions whose first turn is timed at the level of one session (the others time as many as
# they have sessions).
SOLO_NEW_SESSIONS = 10
MAX_LEVEL = 256
SERVERS = ("floor", "parley")


# ------------------------------------------------------------------------------ /proc, the tree


def _stat_fields(pid: int) -> list[str]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants, from the parent pids in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            children.setdefault(parent_pid(int(entry.name)), []).append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # exited while we looked
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def tree_cpu_seconds(root: int) -> float:
    """utime+stime of `root` and its descendants, plus their reaped children (cutime+cstime)."""
    ticks = 0
    for pid in process_tree(root):
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_memory(root: int) -> dict[str, Any]:
    """VmRSS of the server process and the sum over its tree, in MiB."""
    total = 0
    for pid in process_tree(root):
        try:
            total += proc_status(pid)["rss_kib"]
        except (OSError, KeyError):
            continue
    return {
        "rss_mib": mib(proc_status(root)["rss_kib"]),
        "tree_rss_mib": mib(total),
        "tree": process_tree(root),
    }


def alive_descendants(pids: list[int], marker: bytes) -> list[int]:
    """Those of `pids` still running with `marker` in their command line."""
    alive = []
    for pid in pids:
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.append(pid)
        except OSError:
            continue
    return alive


async def reap(pids: list[int]) -> list[int]:
    """Wait up to 10 s for the fixture servers a server started to exit with it; kill the rest.
    Returns the pids that had to be killed (only processes this run caused to start)."""
    marker = b"tests.mcp_servers.fixture_server"
    with anyio.CancelScope(shield=True):
        for _ in range(100):
            if not alive_descendants(pids, marker):
                return []
            await anyio.sleep(0.1)
        killed = alive_descendants(pids, marker)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
    return killed


# ------------------------------------------------------------------------------- the two servers


@dataclass
class Target:
    name: str  # floor or parley
    workdir: Path
    model_url: str
    model_pid: int  # the fake model's process, whose CPU is reported beside the server's

    def command(self, http: bool) -> list[str]:
        if self.name == "floor":
            command = [sys.executable, str(BENCH / "floor_server.py"), "--base-url", self.model_url]
            command += ["--model", MODEL, "--instructions", INSTRUCTIONS, "--api-key-env", KEY_ENV]
            command += ["--history", str(self.workdir / "history.jsonl")]
            command += ["--fixture-log", str(self.workdir / "fixture.jsonl")]
            return command + (["--http", "--port", "0"] if http else [])
        config = write_parley_config(self.workdir, self.model_url)
        command = [sys.executable, "-m", "parley", "serve", "--config", str(config)]
        return command + (["--http", "--host", HOST, "--port", "0", "--log-level", "INFO"] if http else [])

    @property
    def marker(self) -> bytes:
        return b"floor_server.py" if self.name == "floor" else b"parley"


def bench_agent(directory: Path, model_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fixture tool server (read_thing: a read, no approval) and the `bench` agent that uses
    it on the fake model: (server config, agent file fields)."""
    fixture = fixture_over_stdio(directory / "fixture.jsonl")
    fixture["tools"] = {"read_thing": {"effect": "read", "approval": "never"}}
    model = {"provider": "openai", "name": MODEL, "base_url": model_url, "api_key_env": KEY_ENV}
    agent = {
        "name": AGENT,
        "description": "Benchmark agent: the fake OpenAI-compatible model and the fixture tool server.",
        "instructions": INSTRUCTIONS,
        "model": model,
        "mcp_servers": [{"server": "fixture", "include": ["read_thing"]}],
    }
    return fixture, agent


def write_parley_config(directory: Path, model_url: str) -> Path:
    """A fresh database, default runtime settings, the fixture tool server and the `bench` agent
    (bench_agent), and one agent without tools, on the fake model (streamed: parley's default)."""
    fixture, agent = bench_agent(directory, model_url)
    model = agent["model"]
    plain = {
        "name": PLAIN_AGENT,
        "description": "Benchmark agent without tools.",
        "instructions": INSTRUCTIONS,
        "model": model,
    }
    path = directory / "parley.yaml"
    if not path.exists():
        # Connections: 128 clients each hold one or two, past the default cap of 200 (the floor
        # has none), and a request refused at the cap would end the run.
        config = base_config(mcp_servers={"fixture": fixture}, http={"max_connections": 1024})
        write_config_files(directory, config, [agent, plain])
    return path


def stdio_parameters(target: Target, pid_file: Path, log: Path) -> StdioServerParameters:
    """Spawn through sh so the server's pid is known: sh writes its own pid and execs the server."""
    command = shlex.join(target.command(http=False))
    script = f"echo $$ > {shlex.quote(str(pid_file))}; exec {command} 2>> {shlex.quote(str(log))}"
    return StdioServerParameters(
        command="/bin/sh",
        args=["-c", script],
        env={"PYTHONUNBUFFERED": "1", KEY_ENV: KEY},
        cwd=str(REPO),  # the floor starts the fixture server from the repository
    )


def read_pid(pid_file: Path, marker: bytes) -> int:
    pid = int(pid_file.read_text().strip())
    if marker not in Path(f"/proc/{pid}/cmdline").read_bytes():
        raise RuntimeError(f"pid {pid} from {pid_file} is not the expected server")
    if parent_pid(pid) != os.getpid():
        raise RuntimeError(f"pid {pid} is not a child of this process")
    return pid


@asynccontextmanager
async def http_process(target: Target, log: Path) -> AsyncIterator[tuple[Process, str]]:
    """The server over streamable HTTP on 127.0.0.1 (a free port), and its URL; killed if the
    block ends with it still running."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", KEY_ENV: KEY}
    for name in ("PARLEY_DB", "PARLEY_CONFIG"):
        env.pop(name, None)
    with log.open("ab") as sink:
        process = await anyio.open_process(
            target.command(http=True), stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, cwd=REPO, env=env
        )
    try:
        url = await wait_for_line(process, log, "listening on http://")
        yield process, url
    finally:
        if process.returncode is None:
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.wait()


async def wait_for_line(process: Process, log: Path, prefix: str) -> str:
    """The address after `prefix` in a log line (loopback only)."""
    with anyio.fail_after(STARTUP_TIMEOUT_S):
        while True:
            for line in (await anyio.Path(log).read_text(errors="replace")).splitlines():
                if prefix in line:
                    url = line.split("listening on ", 1)[1].strip()
                    if not url.startswith(f"http://{HOST}:"):
                        raise RuntimeError(f"{url} is not on {HOST}")
                    return url
            if process.returncode is not None:
                raise RuntimeError(f"{log.name}: the process exited during start-up ({process.returncode})")
            await anyio.sleep(0.02)


# ---------------------------------------------------------------------------------------- checks


def check_turn(outcome: dict[str, Any], session_id: str | None, message: str, where: str) -> str:
    """Answered, for this session, with the exact answer the fake model gives; returns the session id."""
    if session_id is not None and outcome.get("session_id") != session_id:
        raise RuntimeError(f"{where}: the outcome is for session {outcome.get('session_id')!r}")
    if outcome.get("status") != "answered":
        raise RuntimeError(f"{where}: status {outcome.get('status')!r}, error {outcome.get('error')!r}")
    tool = message == TOOL_MESSAGE
    expected = TOOL_ANSWER if tool else f"echo: {message}"
    if outcome.get("answer") != expected:
        raise RuntimeError(f"{where}: answer {outcome.get('answer')!r}, expected {expected!r}")
    calls = outcome.get("tool_calls") or []
    if tool:
        if len(calls) != 1 or calls[0].get("tool") != TOOL_NAME or calls[0].get("status") != "succeeded":
            raise RuntimeError(f"{where}: tool calls {calls!r}, expected one {TOOL_NAME} that succeeded")
    elif calls:
        raise RuntimeError(f"{where}: unexpected tool calls {calls!r}")
    return str(outcome["session_id"])


async def turn(
    client: Client, timeout_s: float, session_id: str | None, message: str, where: str, agent: str = AGENT
) -> tuple[str, float]:
    """One turn (start_session when there is no session yet); (session id, latency in ms)."""
    t0 = time.perf_counter()
    if session_id is None:
        outcome = await call(client, timeout_s, "start_session", agent=agent, message=message)
    else:
        outcome = await call(client, timeout_s, "send_message", session_id=session_id, message=message)
    elapsed_ms = (time.perf_counter() - t0) * 1000
    return check_turn(outcome, session_id, message, where), elapsed_ms


async def fake_stats(model_url: str) -> dict[str, int]:
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.get(model_url.removesuffix("/v1") + "/stats")
        response.raise_for_status()
        return dict(response.json())


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if k != "max_messages"} | {
        "max_messages": after["max_messages"]
    }


# ------------------------------------------------------------------------------------------ stdio


async def measure_stdio(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    target.workdir.mkdir(parents=True, exist_ok=True)
    pid_file, log = target.workdir / "stdio.pid", target.workdir / "server.log"
    params = stdio_parameters(target, pid_file, log)
    timeout = args.call_timeout
    before = await fake_stats(target.model_url)
    t0 = time.perf_counter()
    async with Client(params) as client:
        startup_s = time.perf_counter() - t0
        pid = read_pid(pid_file, target.marker)

        # The first turn after start, of an agent without tools; then the first turn that needs
        # the tool server (which starts it and lists its tools).
        _, first_ms = await turn(client, timeout, None, "hello", "first turn after start", PLAIN_AGENT)
        _, first_tool_ms = await turn(client, timeout, None, "hello", "first turn with tools")

        # One long session of text turns.
        latencies: list[float] = []
        cpu0 = tree_cpu_seconds(pid)
        wall0, client0 = time.perf_counter(), own_cpu_seconds()
        session_id = None
        for k in range(1, args.turns + 1):
            session_id, ms = await turn(client, timeout, session_id, f"turn {k}", f"text turn {k}")
            latencies.append(ms)
        text_wall_s = time.perf_counter() - wall0
        text_cpu_s = tree_cpu_seconds(pid) - cpu0
        text_client_s = own_cpu_seconds() - client0
        files = db_bytes(target.workdir) if target.name == "parley" else {}

        # One session of tool turns (the first message opens it, untimed).
        session_id, _ = await turn(client, timeout, None, "tools", "tool session")
        tool_latencies: list[float] = []
        cpu0 = tree_cpu_seconds(pid)
        for k in range(1, args.tool_turns + 1):
            _, ms = await turn(client, timeout, session_id, TOOL_MESSAGE, f"tool turn {k}")
            tool_latencies.append(ms)
        tool_cpu_s = tree_cpu_seconds(pid) - cpu0
        memory = tree_memory(pid)
    pids = memory.pop("tree")
    killed = await reap(pids)
    first, last = latencies[:WINDOW], latencies[-WINDOW:]
    return {
        "startup_s": round(startup_s, 3),
        "first_turn_after_start_ms": round(first_ms, 2),
        "first_turn_with_tool_server_ms": round(first_tool_ms, 2),
        "text_turns": args.turns,
        "text": latency_summary(latencies),
        "text_first20_p50_ms": round(percentile(first, 50), 2),
        "text_last20_p50_ms": round(percentile(last, 50), 2),
        "text_last_over_first": round(percentile(last, 50) / percentile(first, 50), 2),
        "text_wall_s": round(text_wall_s, 3),
        "cpu_ms_per_text_turn": round(text_cpu_s / args.turns * 1000, 2),
        # The SDK client's CPU in this process: its share of a turn's latency.
        "client_cpu_ms_per_text_turn": round(text_client_s / args.turns * 1000, 2),
        "tool_turns": args.tool_turns,
        "tool": latency_summary(tool_latencies),
        "cpu_ms_per_tool_turn": round(tool_cpu_s / args.tool_turns * 1000, 2),
        **memory,
        **files,
        "model": delta(await fake_stats(target.model_url), before),
        "killed_leftovers": killed,
        "log": log_counts(log),
    }


def log_counts(log: Path) -> dict[str, int]:
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = text.splitlines()
    return {
        "lines": len(lines),
        "errors": sum(" ERROR " in line or "Traceback" in line for line in lines),
    }


# ------------------------------------------------------------------------------------------- HTTP


async def measure_level(
    url: str, pid: int, model_pid: int, level: int, args: argparse.Namespace
) -> dict[str, Any]:
    """`level` clients connect, then all start together: a new session with its first message
    (timed apart), then `--http-turns` - 1 more turns back to back. Memory is read at the end,
    with every client still connected."""
    turns, timeout = args.http_turns, args.call_timeout
    connect_ms: list[float] = []
    first_ms: list[float] = []
    later_ms: list[float] = []
    ready, go, finished, release = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()
    counts = {"ready": 0, "finished": 0}
    marks: dict[str, float] = {}

    async def caller(index: int) -> None:
        t0 = time.perf_counter()
        async with Client(url) as client:
            connect_ms.append((time.perf_counter() - t0) * 1000)
            counts["ready"] += 1
            if counts["ready"] == level:
                ready.set()
            await go.wait()
            session_id = None
            for k in range(1, turns + 1):
                message = f"caller {index} of {level}, turn {k}"
                where = f"level {level}, caller {index}, turn {k}"
                session_id, ms = await turn(client, timeout, session_id, message, where)
                (first_ms if k == 1 else later_ms).append(ms)
            counts["finished"] += 1
            if counts["finished"] == level:
                marks["end"] = time.perf_counter()
                finished.set()
            await release.wait()

    async with anyio.create_task_group() as tg:
        for index in range(level):
            tg.start_soon(caller, index)
        await ready.wait()
        cpu0, client_cpu0, model_cpu0 = tree_cpu_seconds(pid), own_cpu_seconds(), cpu_seconds(model_pid)
        start = time.perf_counter()
        go.set()
        await finished.wait()
        wall_s = marks["end"] - start
        cpu_s = tree_cpu_seconds(pid) - cpu0
        client_cpu_s = own_cpu_seconds() - client_cpu0
        model_cpu_s = cpu_seconds(model_pid) - model_cpu0
        memory = tree_memory(pid)
        release.set()
    if level == 1:
        # One session alone is one sample of its first turn: more, one after another, so its
        # p50 is not one draw (outside the span turns/s and CPU are measured over).
        for k in range(2, SOLO_NEW_SESSIONS + 1):
            async with Client(url) as client:
                first_ms.append((await turn(client, timeout, None, "alone", f"level 1, new session {k}"))[1])
    total = level * turns
    return {
        "level": level,
        "turns": total,
        "wall_s": round(wall_s, 3),
        "turns_per_s": round(total / wall_s, 1),
        "first_turn": latency_summary(first_ms),
        "turn": latency_summary(later_ms),
        "connect_p50_ms": round(percentile(connect_ms, 50), 2),
        "cpu_ms_per_turn": round(cpu_s / total * 1000, 2),
        "server_cpu_share": round(cpu_s / wall_s, 2),
        "client_cpu_share": round(client_cpu_s / wall_s, 2),
        "model_cpu_share": round(model_cpu_s / wall_s, 2),
        "rss_mib": memory["rss_mib"],
        "tree_rss_mib": memory["tree_rss_mib"],
        "tree": memory["tree"],
    }


async def measure_http(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    target.workdir.mkdir(parents=True, exist_ok=True)
    log = target.workdir / "server.log"
    before = await fake_stats(target.model_url)
    started = time.perf_counter()
    pids: list[int] = []
    async with http_process(target, log) as (process, url):
        startup_s = time.perf_counter() - started
        idle = tree_memory(process.pid)
        async with Client(url) as client:  # warm-up: starts the tool server, outside the levels
            session_id, _ = await turn(client, args.call_timeout, None, "warm up", "warm-up")
            await turn(client, args.call_timeout, session_id, "warm up again", "warm-up")
        levels = []
        for level in args.concurrency:
            result = await measure_level(url, process.pid, target.model_pid, level, args)
            pids = sorted(set(pids) | set(result.pop("tree")))
            levels.append(result)
        exit_code, stop_s, killed = await stop_process(process)
    leftovers = await reap(pids)
    return {
        "startup_s": round(startup_s, 3),
        "idle_rss_mib": idle["rss_mib"],
        "levels": levels,
        "exit_code": exit_code,
        "stop_s": round(stop_s, 3),
        "killed_after_sigterm": killed,
        "killed_leftovers": leftovers,
        "model": delta(await fake_stats(target.model_url), before),
        "log": log_counts(log),
        **(db_bytes(target.workdir) if target.name == "parley" else {}),
    }


# --------------------------------------------------------------------------------------- the run


@asynccontextmanager
async def fake_model(workdir: Path, delay_ms: float) -> AsyncIterator[tuple[str, int]]:
    log = workdir / "fake_openai.log"
    with log.open("ab") as sink:
        process = await anyio.open_process(
            [sys.executable, str(BENCH / "fake_openai.py"), "--delay-ms", str(delay_ms)],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        yield await wait_for_line(process, log, "listening on http://"), process.pid
    finally:
        with anyio.CancelScope(shield=True):
            await stop_process(process, 10)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_before = loadavg_1m()
    started = time.perf_counter()
    runs: list[dict[str, dict[str, Any]]] = []
    async with fake_model(workdir, args.model_delay_ms) as (model_url, model_pid):
        for repeat in range(1, args.repeat + 1):
            results: dict[str, dict[str, Any]] = {name: {} for name in SERVERS}
            for transport in args.transports:
                for name in SERVERS:
                    folder = workdir / f"{name}-{transport}-{repeat}"
                    target = Target(name, folder, model_url, model_pid)
                    measure = measure_stdio if transport == "stdio" else measure_http
                    print(f"  ... {transport}: {name} ({repeat}/{args.repeat})", file=sys.stderr, flush=True)
                    results[name][transport] = await measure(target, args)
            runs.append(results)
        model_totals = await fake_stats(model_url)
    return {
        "options": {
            "turns": args.turns,
            "tool_turns": args.tool_turns,
            "http_turns": args.http_turns,
            "concurrency": args.concurrency,
            "transports": args.transports,
            "model_delay_ms": args.model_delay_ms,
            "repeat": args.repeat,
        },
        # With --repeat, each figure is the median of the runs (floor and parley alternate).
        "servers": median_of(runs),
        "model_totals": model_totals,
        "commit": git_commit(),
        **run_figures(started, load_before, "sqlite", "mcp"),
    }


def median_of(runs: list[Any]) -> Any:
    """The runs' results merged figure by figure: the median of numbers, dicts by key and lists
    by position; anything else as the first run has it."""
    first = runs[0]
    if isinstance(first, bool) or not isinstance(first, int | float | dict | list):
        return first
    if isinstance(first, int | float):
        values = [r for r in runs if isinstance(r, int | float) and not isinstance(r, bool)]
        return round(statistics.median(values), 3) if len(values) == len(runs) else first
    if isinstance(first, dict):
        return {k: median_of([r[k] for r in runs if k in r]) for k in first}
    if all(isinstance(r, list) and len(r) == len(first) for r in runs):
        return [median_of([r[i] for r in runs]) for i in range(len(first))]
    return first


def run_logs(workdir: Path) -> str:
    """What a failed run shows: the fake model's log and each server's, first error and tail."""
    parts = [log_excerpt(workdir / "fake_openai.log", "fake model log")]
    for log in sorted(workdir.glob("*/server.log")):
        parts.append(log_excerpt(log, f"{log.parent.name} server log"))
    return "\n".join(parts)


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


# ---------------------------------------------------------------------------------------- report


def level_of(result: dict[str, Any], level: int) -> dict[str, Any] | None:
    for entry in result.get("http", {}).get("levels", []):
        if entry["level"] == level:
            return dict(entry)
    return None


Row = tuple[str, Callable[[dict[str, Any]], float | None], str, str | None, float | None]


def rows(concurrency: list[int]) -> list[Row]:
    """(label, figure of one server's results, unit, target kind, bound)."""

    def stdio(*keys: str) -> Callable[[dict[str, Any]], float | None]:
        def get(r: dict[str, Any]) -> float | None:
            value: Any = r.get("stdio")
            for key in keys:
                if value is None:
                    return None
                value = value.get(key)
            figure: float | None = value
            return figure

        return get

    def http(level: int, *keys: str) -> Callable[[dict[str, Any]], float | None]:
        def get(r: dict[str, Any]) -> float | None:
            value: Any = level_of(r, level)
            for key in keys:
                if value is None:
                    return None
                value = value.get(key)
            figure: float | None = value
            return figure

        return get

    table: list[Row] = [
        ("text turn p50, stdio, one session", stdio("text", "p50_ms"), "ms", "ratio<=", 1.3),
        ("text turn p50, first 20 turns", stdio("text_first20_p50_ms"), "ms", None, None),
        ("text turn p50, last 20 turns", stdio("text_last20_p50_ms"), "ms", None, None),
        ("last 20 / first 20 (own)", stdio("text_last_over_first"), "x", "own<=", 1.3),
        ("one-tool turn p50, stdio", stdio("tool", "p50_ms"), "ms", "ratio<=", 1.3),
        ("server CPU per text turn (tree)", stdio("cpu_ms_per_text_turn"), "ms", "ratio<=", 1.5),
        ("server CPU per tool turn (tree)", stdio("cpu_ms_per_tool_turn"), "ms", None, None),
        ("client CPU per text turn (the SDK's)", stdio("client_cpu_ms_per_text_turn"), "ms", None, None),
        ("first turn over stdio after start", stdio("first_turn_after_start_ms"), "ms", None, None),
        (
            "first turn that starts the tool server",
            stdio("first_turn_with_tool_server_ms"),
            "ms",
            None,
            None,
        ),
        ("stdio start + handshake", stdio("startup_s"), "s", None, None),
    ]
    for level in concurrency:
        target = ("ratio>=", 0.7) if level == 32 else (None, None)
        table.append((f"turns/s, {level} HTTP sessions", http(level, "turns_per_s"), "/s", *target))
    for level in concurrency:
        target = ("ratio<=", 1.5) if level in (1, 32) else (None, None)
        table.append(
            (
                f"first turn of a new session, N={level}, p50",
                http(level, "first_turn", "p50_ms"),
                "ms",
                *target,
            )
        )
    for level in concurrency:
        table.append((f"turn p50 at N={level} (HTTP)", http(level, "turn", "p50_ms"), "ms", None, None))
        table.append(
            (f"server CPU per turn at N={level} (tree)", http(level, "cpu_ms_per_turn"), "ms", None, None)
        )
    for level in concurrency:
        target = ("ratio<=", 1.2) if level == 32 else (None, None)
        table.append((f"server RSS at {level} sessions", http(level, "rss_mib"), "MiB", *target))
    return table


def verdict(kind: str | None, bound: float | None, floor: float | None, parley: float | None) -> str:
    if kind is None or bound is None or parley is None:
        return ""
    if kind == "abs<=" or kind == "own<=":
        ok = parley <= bound
    elif floor in (None, 0):
        return "n/a"
    elif kind == "ratio<=":
        ok = parley / floor <= bound
    else:
        ok = parley / floor >= bound
    return "PASS" if ok else "MISS"


def target_text(kind: str | None, bound: float | None, unit: str) -> str:
    if kind is None:
        return ""
    if kind == "ratio<=":
        return f"<= {bound}x floor"
    if kind == "ratio>=":
        return f">= {bound}x floor"
    if kind == "own<=":
        return f"<= {bound}"
    return f"<= {bound:g} {unit}"


def report(r: dict[str, Any]) -> None:
    floor, parley = r["servers"]["floor"], r["servers"]["parley"]
    o = r["options"]
    print(
        f"parley vs floor: stdio {o['turns']} text + {o['tool_turns']} tool turns; HTTP levels "
        f"{','.join(map(str, o['concurrency']))} x {o['http_turns']} turns; commit {r['commit']}"
        + (f"; medians of {o['repeat']} runs" if o.get("repeat", 1) > 1 else "")
    )
    header = f"  {'figure':<44} {'floor':>10} {'parley':>10} {'ratio':>7}  {'target':<16} verdict"
    print(header)
    print("  " + "-" * (len(header) - 2))
    verdicts: dict[str, str] = {}
    for label, get, unit, kind, bound in rows(o["concurrency"]):
        f, p = get(floor), get(parley)
        if f is None and p is None:
            continue
        ratio = f"{p / f:.2f}" if f and p is not None and kind != "own<=" else ""
        v = verdict(kind, bound, f, p)
        if v:
            verdicts[label] = v
        fs = "" if f is None else f"{f:g}"
        ps = "" if p is None else f"{p:g}"
        print(
            f"  {label + f' ({unit})':<44} {fs:>10} {ps:>10} {ratio:>7}  {target_text(kind, bound, unit):<16} {v}"
        )
    for name in SERVERS:
        for transport in o["transports"]:
            m = r["servers"][name][transport]["model"]
            per = m["request_bytes"] / m["requests"] if m["requests"] else 0
            print(
                f"  {name} {transport}: {m['requests']} model requests ({m['streamed']} streamed), "
                f"{per:,.0f} request bytes each on average, up to {m['max_messages']} messages"
            )
    for name in SERVERS:
        for entry in r["servers"][name].get("http", {}).get("levels", []):
            print(
                f"  {name} N={entry['level']}: server tree {entry['server_cpu_share']} of a core, "
                f"clients {entry['client_cpu_share']}, fake model {entry['model_cpu_share']}; "
                f"connect p50 {entry['connect_p50_ms']} ms"
            )
    print(
        f"  load average {r['loadavg_1m_before']} -> {r['loadavg_1m_after']}, nproc {r['nproc']}, "
        f"Python {r['python']}, SQLite {r['sqlite']}, mcp {r['mcp']}, total {r['total_wall_s']} s"
    )
    r["verdicts"] = verdicts
    print(json.dumps(r, sort_keys=True))


# ------------------------------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run: 60 text turns, levels 1,8")
    parser.add_argument(
        "--concurrency",
        type=lambda text: parse_level_list(text, MAX_LEVEL, "1,8,32,128"),
        default=None,
        help="HTTP levels (default 1,8,32,128; --quick 1,8)",
    )
    parser.add_argument("--turns", type=int, default=None, help="text turns of the stdio session (300)")
    parser.add_argument("--tool-turns", type=int, default=None, help="tool turns over stdio (50)")
    parser.add_argument("--http-turns", type=int, default=None, help="turns per HTTP session (20)")
    parser.add_argument(
        "--transports",
        type=lambda text: [t for t in text.split(",") if t],
        default=["stdio", "http"],
        help="stdio,http (default both)",
    )
    parser.add_argument(
        "--model-delay-ms", type=float, default=0.0, help="the fake model waits this long per answer (0)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run everything this many times, floor and parley alternating, and report each figure's "
        "median (the machine's noise moves one run's figures by 10-15%%)",
    )
    add_limit_options(parser, 1800.0)
    args = parser.parse_args()
    quick = args.quick
    args.concurrency = args.concurrency or ([1, 8] if quick else [1, 8, 32, 128])
    args.turns = args.turns or (60 if quick else 300)
    args.tool_turns = args.tool_turns or (10 if quick else 50)
    args.http_turns = args.http_turns or (5 if quick else 20)
    if not WINDOW <= args.turns <= MAX_TURNS - 2:
        parser.error(f"--turns must be {WINDOW}..{MAX_TURNS - 2}")
    if not 1 <= args.tool_turns <= MAX_TURNS - 1 or not 1 <= args.http_turns <= MAX_TURNS:
        parser.error("--tool-turns and --http-turns must be 1..999")
    if not 1 <= args.repeat <= 9:
        parser.error("--repeat must be 1..9")
    if set(args.transports) - {"stdio", "http"} or not args.transports:
        parser.error("--transports takes stdio, http or both")
    require_linux(parser, "stat")

    return run_and_report(lambda workdir: run(args, workdir), args.deadline, run_logs, report)


if __name__ == "__main__":
    sys.exit(main())
