"""Overhead of one MCP tool call inside a turn, for a stdio and a streamable-HTTP tool server.

Starts the fixture MCP server of the tests (`tests/mcp_servers/fixture_server.py`) over
streamable HTTP on a free 127.0.0.1 port, then `parley serve` over stdio (mcp SDK
`Client(StdioServerParameters(...))`) on a fresh SQLite file in a temporary directory (default
runtime settings) with two tool servers under `mcp_servers:`: `fixture` (the same fixture, started
by parley over stdio) and `fixture_http` (the HTTP one). One agent file uses both.

For each variant (stdio, HTTP) it opens one session and, after a warm-up, sends N pairs of turns
back to back: `/tool <server>__read_thing {"name": "x"}` (the demo model calls the read-only,
instant tool, then answers quoting its result) and a plain-text turn (the baseline: one model
call, no tool). Tool and text turns alternate, so both see the same history length. It reports
p50/p95 of each kind and the difference: the tool-call overhead (a second model step, the tool
step, their commits and the MCP round trip to the tool server). It also times the same
`read_thing` call made with a bare mcp `Client` from this process, to both fixture servers, so the
part parley adds on top of the bare MCP round trip is visible. Every answer is checked.

Prints readable lines, then one final JSON line with every figure.

    .venv/bin/python bench/mcp_tool_overhead.py [--turns 100] [--warmup 5] [--deadline 600]

The script talks only to 127.0.0.1 and to the subprocesses it starts (and their children), stops
by itself, and is bounded by --deadline (the whole run) and --call-timeout (each tool call). At
the end it checks that no fixture server it caused to start is still running.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _common import (
    FIXTURE,
    HOST,
    REPO,
    STARTUP_TIMEOUT_S,
    add_limit_options,
    base_config,
    call,
    connect_read_only,
    cpu_seconds,
    fixture_over_stdio,
    json_lines,
    latency_summary,
    loadavg_1m,
    log_excerpt,
    percentile,
    read_server_pid,
    run_and_report,
    run_figures,
    stdio_server_parameters,
    stop_process,
    write_config_files,
)
from anyio.abc import Process
from mcp import Client, StdioServerParameters

AGENT = "bench"
TOOL = "read_thing"
ARGUMENTS = {"name": "x"}
TOOL_TEXT = "thing x is fine"
# The idempotency-key _meta field parley sends with every call; the direct calls send one too.
IDEMPOTENCY_META_KEY = "dev.parley/idempotency-key"
VARIANTS = {"stdio": "fixture", "http": "fixture_http"}  # variant -> server name in parley.yaml
# The agent's limits.max_turns (default 1000) bounds one session: 2 turns per pair.
MAX_TURNS_PER_SESSION = 1000
WINDOW = 20  # pairs in the "first" and "last" windows
STOP_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def write_config(directory: Path, http_port: int, logs: Path) -> Path:
    """parley.yaml (fresh database, default runtime settings, the two tool servers) and one agent
    file that uses both."""
    servers = {
        "fixture": fixture_over_stdio(logs / "fixture.jsonl"),
        "fixture_http": {"url": f"http://{HOST}:{http_port}/mcp"},
    }
    agent = {
        "name": AGENT,
        "description": "Benchmark agent: the demo model with both fixture tool servers.",
        "mcp_servers": list(VARIANTS.values()),
    }
    return write_config_files(directory, base_config(mcp_servers=servers), [agent])


# ---------------------------------------------------------------------------------------- fixtures


async def start_http_fixture(port: int, log: Path, calls_log: Path) -> Process:
    """The fixture over streamable HTTP on 127.0.0.1:port; its output goes to a log file."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "FIXTURE_LOG": str(calls_log)}
    with log.open("ab") as sink:
        process = await anyio.open_process(
            [*FIXTURE, "--http", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            cwd=REPO,
            env=env,
        )
    try:
        with anyio.fail_after(STARTUP_TIMEOUT_S):
            while True:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"the HTTP fixture exited during start-up with code {process.returncode}"
                    )
                try:
                    socket.create_connection((HOST, port), timeout=1).close()
                    break
                except OSError:
                    await anyio.sleep(0.05)
    except BaseException:
        await stop_fixture(process)
        raise
    return process


async def stop_fixture(process: Process) -> tuple[int, bool]:
    """SIGTERM, then wait; SIGKILL only if it does not exit in time, even when cancelled.
    (exit code, killed)."""
    with anyio.CancelScope(shield=True):
        exit_code, _, killed = await stop_process(process, STOP_TIMEOUT_S)
    return exit_code, killed


def is_our_fixture(pid: int, calls_log: Path) -> bool:
    """True while `pid` is a live fixture server writing to `calls_log` (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"tests.mcp_servers.fixture_server" in cmdline and f"FIXTURE_LOG={calls_log}".encode() in environ


async def reap_fixtures(calls_log: Path) -> list[int]:
    """Wait for the fixture processes that parley started (their pids are in `calls_log`) to exit;
    kill any still running after STOP_TIMEOUT_S. Returns the pids that had to be killed."""
    pids = {int(c["pid"]) for c in json_lines(calls_log)}
    with anyio.CancelScope(shield=True):
        for _ in range(int(STOP_TIMEOUT_S / 0.1)):  # poll: these are not our children
            if not any(is_our_fixture(pid, calls_log) for pid in pids):
                break
            await anyio.sleep(0.1)
    killed = [pid for pid in sorted(pids) if is_our_fixture(pid, calls_log)]
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    return killed


# ------------------------------------------------------------------------------------ direct calls


async def measure_direct(
    target: Any, turns: int, warmup: int, call_timeout_s: float, label: str
) -> dict[str, Any]:
    """`read_thing` with a bare mcp Client (default mode, like parley's), warm-up then N timed calls."""
    latencies_ms: list[float] = []
    t0 = time.perf_counter()
    async with Client(target) as client:
        connect_ms = (time.perf_counter() - t0) * 1000
        for i in range(warmup + turns):
            t1 = time.perf_counter()
            result = await client.call_tool(
                TOOL,
                ARGUMENTS,
                read_timeout_seconds=call_timeout_s,
                meta={IDEMPOTENCY_META_KEY: f"bench/direct/{label}/{i}"},  # type: ignore[arg-type]
            )
            elapsed_ms = (time.perf_counter() - t1) * 1000
            text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
            if result.is_error or text != TOOL_TEXT:
                raise RuntimeError(f"direct {label} call {i}: is_error {result.is_error}, text {text!r}")
            if i >= warmup:
                latencies_ms.append(elapsed_ms)
    return {"calls": turns, "connect_ms": round(connect_ms, 2), **latency_summary(latencies_ms)}


# -------------------------------------------------------------------------------------- via parley


def check_common(outcome: dict[str, Any], session_id: str, where: str) -> None:
    if outcome.get("session_id") != session_id:
        raise RuntimeError(f"{where}: the outcome is for session {outcome.get('session_id')!r}")
    if outcome.get("status") != "answered":
        raise RuntimeError(f"{where}: status {outcome.get('status')!r}, error {outcome.get('error')!r}")


def check_text_turn(outcome: dict[str, Any], session_id: str, text: str, message_no: int) -> None:
    where = f"session {session_id} text turn (message {message_no})"
    check_common(outcome, session_id, where)
    expected = f"You said: {text} (message {message_no} of this session)"
    if outcome.get("answer") != expected or outcome.get("tool_calls"):
        raise RuntimeError(
            f"{where}: answer {outcome.get('answer')!r}, tool calls {outcome.get('tool_calls')!r}"
        )
    if outcome.get("usage", {}).get("model_calls") != 1:
        raise RuntimeError(f"{where}: usage {outcome.get('usage')!r}, expected one model call")


def check_tool_turn(outcome: dict[str, Any], session_id: str, server: str, message_no: int) -> None:
    """Answered, exactly one call of <server>__read_thing that succeeded with the fixture's text,
    and the answer quotes that result."""
    where = f"session {session_id} tool turn (message {message_no})"
    check_common(outcome, session_id, where)
    calls = outcome.get("tool_calls") or []
    if len(calls) != 1:
        raise RuntimeError(f"{where}: {len(calls)} tool calls, expected 1: {calls!r}")
    c = calls[0]
    expected = (f"{server}__{TOOL}", ARGUMENTS, "succeeded", False, server, TOOL_TEXT, "read")
    got = (
        c.get("tool"),
        c.get("arguments"),
        c.get("status"),
        c.get("is_error"),
        c.get("server"),
        c.get("result"),
        c.get("effect"),
    )
    if got != expected:
        raise RuntimeError(f"{where}: tool call {c!r}, expected {expected!r}")
    if f"(ok): {TOOL_TEXT}" not in (outcome.get("answer") or ""):
        raise RuntimeError(f"{where}: the answer does not quote the result: {outcome.get('answer')!r}")
    if outcome.get("usage", {}).get("model_calls") != 2:
        raise RuntimeError(f"{where}: usage {outcome.get('usage')!r}, expected two model calls")


async def measure_variant(
    client: Client, pid: int, variant: str, server: str, turns: int, warmup: int, call_timeout_s: float
) -> dict[str, Any]:
    """One session: `warmup` then `turns` pairs of (tool turn, text turn), back to back."""
    session = await call(client, call_timeout_s, "start_session", agent=AGENT)
    if session.get("status") != "idle":
        raise RuntimeError(f"{variant}: start_session without a message gave {session!r}")
    session_id = str(session["session_id"])
    tool_message = f"/tool {server}__{TOOL} {json.dumps(ARGUMENTS)}"
    samples: dict[str, list[float]] = {"tool": [], "text": []}
    cpu: dict[str, float] = {"tool": 0.0, "text": 0.0}
    turn_ids: dict[str, list[str]] = {"tool": [], "text": []}
    first_ms: float | None = None
    message_no = 0
    wall_started = time.perf_counter()
    for pair in range(1, warmup + turns + 1):
        timed = pair > warmup
        for kind in ("tool", "text"):
            message_no += 1
            text = f"plain turn {pair}"
            message = tool_message if kind == "tool" else text
            cpu_before = cpu_seconds(pid)
            t0 = time.perf_counter()
            outcome = await call(
                client, call_timeout_s, "send_message", session_id=session_id, message=message
            )
            elapsed_ms = (time.perf_counter() - t0) * 1000
            cpu_used = cpu_seconds(pid) - cpu_before
            if kind == "tool":
                check_tool_turn(outcome, session_id, server, message_no)
            else:
                check_text_turn(outcome, session_id, text, message_no)
            if first_ms is None:
                first_ms = elapsed_ms
            if timed:
                samples[kind].append(elapsed_ms)
                cpu[kind] += cpu_used
                turn_ids[kind].append(str(outcome["turn_id"]))
            if pair == warmup and kind == "text":
                wall_started = time.perf_counter()
    wall_s = time.perf_counter() - wall_started

    tool, text_only = latency_summary(samples["tool"]), latency_summary(samples["text"])
    paired = [a - b for a, b in zip(samples["tool"], samples["text"], strict=True)]
    window = min(WINDOW, turns)

    def window_overhead(part: slice) -> float:
        """p50 of the tool turns minus p50 of the text turns, over some of the pairs."""
        return round(percentile(samples["tool"][part], 50) - percentile(samples["text"][part], 50), 2)

    assert first_ms is not None
    return {
        "server": server,
        "tool": f"{server}__{TOOL}",
        "session_id": session_id,
        "pairs": turns,
        "first_turn_ms": round(first_ms, 2),
        "tool_turn": tool,
        "text_turn": text_only,
        "overhead_p50_ms": round(tool["p50_ms"] - text_only["p50_ms"], 2),
        "overhead_p95_ms": round(tool["p95_ms"] - text_only["p95_ms"], 2),
        "paired_diff_p50_ms": round(percentile(paired, 50), 2),
        "paired_diff_p95_ms": round(percentile(paired, 95), 2),
        # The transcript grows by 6 messages a pair; each step reloads it (see bench/README.md).
        "window_pairs": window,
        "first_pairs_overhead_p50_ms": window_overhead(slice(None, window)),
        "last_pairs_overhead_p50_ms": window_overhead(slice(-window, None)),
        "first_pairs_text_p50_ms": round(percentile(samples["text"][:window], 50), 2),
        "last_pairs_text_p50_ms": round(percentile(samples["text"][-window:], 50), 2),
        "wall_s": round(wall_s, 3),
        "server_cpu_ms_per_tool_turn": round(cpu["tool"] / turns * 1000, 2),
        "server_cpu_ms_per_text_turn": round(cpu["text"] / turns * 1000, 2),
        "turn_ids": turn_ids,
    }


# ------------------------------------------------------------------------------ server-side times


# Segments of a turn on the server's clock, between the events parley stores. Each event is
# stamped with the clock read just before the transaction that writes it.
TOOL_SEGMENTS = {
    # turn start commit, load the session and transcript, offer tools, model call 1
    "start_to_model_1": ("turn_started", 0, "model_step", 0),
    # commit model step 1 (with the call), reload the transcript, decide to run the tool
    "model_1_to_tool_started": ("model_step", 0, "tool_started", 0),
    # commit the call as running, then the MCP call through the toolbox
    "tool_step": ("tool_started", 0, "tool_finished", 0),
    # commit the result, reload the transcript, offer tools, model call 2
    "tool_finished_to_model_2": ("tool_finished", 0, "model_step", 1),
    # commit model step 2, reload, finish the turn
    "model_2_to_end": ("model_step", 1, "turn_ended", 0),
    # everything the tool call adds inside the turn
    "model_1_to_model_2": ("model_step", 0, "model_step", 1),
    "whole_turn": ("turn_started", 0, "turn_ended", 0),
}
TEXT_SEGMENTS = {
    "start_to_model_1": ("turn_started", 0, "model_step", 0),
    "model_1_to_end": ("model_step", 0, "turn_ended", 0),
    "whole_turn": ("turn_started", 0, "turn_ended", 0),
}


def server_side_times(db: Path, turn_ids: dict[str, list[str]]) -> dict[str, Any]:
    """p50/p95/max of each segment of the timed turns, from the events table (read after parley
    has exited). A tool turn must have two model steps and one tool call, a text turn one step."""
    result: dict[str, Any] = {}
    with connect_read_only(db, timeout=5.0) as conn:
        for kind, ids in turn_ids.items():
            segments = TOOL_SEGMENTS if kind == "tool" else TEXT_SEGMENTS
            spans: dict[str, list[float]] = {name: [] for name in segments}
            for turn_id in ids:
                rows = conn.execute(
                    "SELECT kind, created_at FROM events WHERE turn_id = ? ORDER BY seq", (turn_id,)
                ).fetchall()
                at: dict[str, list[float]] = {}
                for event_kind, created_at in rows:
                    at.setdefault(event_kind, []).append(created_at)
                wanted = {"turn_started": 1, "model_step": 2 if kind == "tool" else 1, "turn_ended": 1}
                if kind == "tool":
                    wanted |= {"tool_started": 1, "tool_finished": 1}
                if any(len(at.get(name, [])) != count for name, count in wanted.items()):
                    raise RuntimeError(f"{kind} turn {turn_id}: unexpected events {[r[0] for r in rows]}")
                for name, (a, i, b, j) in segments.items():
                    spans[name].append((at[b][j] - at[a][i]) * 1000)
            result[f"{kind}_turn"] = {name: latency_summary(values) for name, values in spans.items()}
    return result


# ------------------------------------------------------------------------------------------- run


async def run(turns: int, warmup: int, call_timeout_s: float, workdir: Path) -> dict[str, Any]:
    logs = workdir / "logs"
    logs.mkdir()
    port = free_port()
    config = write_config(workdir, port, logs)
    pid_file, server_log, db = workdir / "server.pid", workdir / "server.log", workdir / "parley.db"
    http_calls, stdio_calls = logs / "fixture_http.jsonl", logs / "fixture.jsonl"
    direct_stdio_calls = logs / "direct_stdio.jsonl"
    load_before = loadavg_1m()
    started = time.perf_counter()

    http_fixture = await start_http_fixture(port, workdir / "fixture_http.log", http_calls)
    try:
        # 1. The bare MCP round trip, from this process, to a stdio fixture and to the HTTP one.
        direct_stdio_target = StdioServerParameters(**fixture_over_stdio(direct_stdio_calls))
        direct = {
            "stdio": await measure_direct(direct_stdio_target, turns, warmup, call_timeout_s, "stdio"),
            "http": await measure_direct(f"http://{HOST}:{port}/mcp", turns, warmup, call_timeout_s, "http"),
        }
        http_direct_calls = len(json_lines(http_calls))

        # 2. The same call as a tool of a parley agent, one session per variant.
        params = stdio_server_parameters(workdir, config, pid_file, server_log)
        t0 = time.perf_counter()
        variants: dict[str, dict[str, Any]] = {}
        async with Client(params) as client:
            startup_s = time.perf_counter() - t0
            pid = read_server_pid(pid_file)
            for variant, server in VARIANTS.items():
                variants[variant] = await measure_variant(
                    client, pid, variant, server, turns, warmup, call_timeout_s
                )
            closing = time.perf_counter()
        stop_s = time.perf_counter() - closing  # the SDK closes parley's stdin and waits for it to exit
    finally:
        http_exit, http_killed = await stop_fixture(http_fixture)
        killed_fixtures = await reap_fixtures(stdio_calls)

    # 3. Every call really reached the fixture, once; parley's stdio fixture has exited.
    per_session = warmup + turns
    stdio_logged = json_lines(stdio_calls)
    counts = {
        "direct_stdio": len(json_lines(direct_stdio_calls)),
        "direct_http": http_direct_calls,
        "parley_stdio": len(stdio_logged),
        "parley_http": len(json_lines(http_calls)) - http_direct_calls,
    }
    if set(counts.values()) != {per_session}:
        raise RuntimeError(f"calls logged by the fixture servers {counts}, expected {per_session} each")
    keys = [c["key"] for c in stdio_logged]
    if len(set(keys)) != len(keys) or None in keys:
        raise RuntimeError("parley's calls to the stdio fixture do not carry distinct idempotency keys")

    server_side = {v: server_side_times(db, r.pop("turn_ids")) for v, r in variants.items()}
    for variant, r in variants.items():
        r["parley_added_p50_ms"] = round(r["overhead_p50_ms"] - direct[variant]["p50_ms"], 2)
        r["server_side"] = server_side[variant]

    return {
        "agent": AGENT,
        "turns": turns,
        "warmup": warmup,
        "arguments": ARGUMENTS,
        "direct": direct,
        "variants": variants,
        "fixture_calls": counts,
        "startup_s": round(startup_s, 3),
        "parley_stop_s": round(stop_s, 3),
        "http_fixture_exit": http_exit,
        "http_fixture_killed": http_killed,
        "stdio_fixtures_killed_after_parley_exit": killed_fixtures,
        **run_figures(started, load_before, "sqlite", "mcp"),
    }


def report(r: dict[str, Any]) -> None:
    print(
        f"parley MCP tool-call overhead: '{r['agent']}' agent, {r['turns']} timed pairs of turns per"
        f" variant after {r['warmup']} warm-up pairs, tool {TOOL} {json.dumps(r['arguments'])}"
    )
    for variant, d in r["direct"].items():
        print(
            f"  direct {variant:<5} (bare mcp Client, {d['calls']} calls)  p50 {d['p50_ms']:7.2f} ms"
            f"   p95 {d['p95_ms']:7.2f} ms   max {d['max_ms']:7.2f} ms   connect {d['connect_ms']:.1f} ms"
        )
    print(
        f"  parley start + MCP handshake {r['startup_s']:.3f} s;"
        f" exit after the client closed it {r['parley_stop_s']:.3f} s"
    )
    for variant, v in r["variants"].items():
        t, x = v["tool_turn"], v["text_turn"]
        print(f"  {variant} tool server '{v['server']}' (tool {v['tool']}), one session:")
        print(
            f"    tool turn   p50 {t['p50_ms']:7.2f} ms   p95 {t['p95_ms']:7.2f} ms   max {t['max_ms']:7.2f} ms"
        )
        print(
            f"    text turn   p50 {x['p50_ms']:7.2f} ms   p95 {x['p95_ms']:7.2f} ms   max {x['max_ms']:7.2f} ms"
        )
        print(
            f"    overhead of the tool call: p50 {v['overhead_p50_ms']:.2f} ms, p95 {v['overhead_p95_ms']:.2f} ms"
            f" (paired tool - text: p50 {v['paired_diff_p50_ms']:.2f} ms, p95 {v['paired_diff_p95_ms']:.2f} ms)"
        )
        print(
            f"    overhead p50 over the first {v['window_pairs']} pairs {v['first_pairs_overhead_p50_ms']:.2f} ms,"
            f" the last {v['window_pairs']} {v['last_pairs_overhead_p50_ms']:.2f} ms"
            f" (text turn p50 {v['first_pairs_text_p50_ms']:.2f} -> {v['last_pairs_text_p50_ms']:.2f} ms)"
        )
        print(
            f"    of which the bare MCP round trip p50 {r['direct'][variant]['p50_ms']:.2f} ms;"
            f" parley adds p50 {v['parley_added_p50_ms']:.2f} ms"
        )
        tool_s, text_s = v["server_side"]["tool_turn"], v["server_side"]["text_turn"]
        print(
            f"    server clock p50: text turn {text_s['whole_turn']['p50_ms']:.2f} ms"
            f" (start -> model {text_s['start_to_model_1']['p50_ms']:.2f}, model -> end"
            f" {text_s['model_1_to_end']['p50_ms']:.2f})"
        )
        print(
            f"    server clock p50: tool turn {tool_s['whole_turn']['p50_ms']:.2f} ms"
            f" (start -> model 1 {tool_s['start_to_model_1']['p50_ms']:.2f},"
            f" model 1 -> tool started {tool_s['model_1_to_tool_started']['p50_ms']:.2f},"
            f" tool step {tool_s['tool_step']['p50_ms']:.2f},"
            f" tool finished -> model 2 {tool_s['tool_finished_to_model_2']['p50_ms']:.2f},"
            f" model 2 -> end {tool_s['model_2_to_end']['p50_ms']:.2f};"
            f" model 1 -> model 2 {tool_s['model_1_to_model_2']['p50_ms']:.2f})"
        )
        print(
            f"    server CPU per tool turn {v['server_cpu_ms_per_tool_turn']:.2f} ms, per text turn"
            f" {v['server_cpu_ms_per_text_turn']:.2f} ms   first turn of the session {v['first_turn_ms']:.2f} ms"
            f"   wall {v['wall_s']:.3f} s"
        )
    c = r["fixture_calls"]
    print(f"  calls logged by the fixture servers {c} (all answers checked)")
    killed = r["stdio_fixtures_killed_after_parley_exit"]
    print(
        f"  HTTP fixture exit code {r['http_fixture_exit']}{' (killed)' if r['http_fixture_killed'] else ''};"
        f" parley's stdio fixture {'had to be killed: ' + str(killed) if killed else 'exited with parley'}"
    )
    print(
        f"  total wall time {r['total_wall_s']:.3f} s   machine nproc {r['nproc']}, Python {r['python']},"
        f" SQLite {r['sqlite']}, mcp {r['mcp']}"
    )
    print(f"  1-minute load average before {r['loadavg_1m_before']}, after {r['loadavg_1m_after']}")
    print(json.dumps(r, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="timed tool turns (and as many text turns)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed pairs of turns first (default 5)")
    add_limit_options(parser, 600.0)
    args = parser.parse_args()
    most = MAX_TURNS_PER_SESSION // 2
    if args.turns < 1 or args.warmup < 0 or args.turns + args.warmup > most:
        parser.error(f"--turns >= 1, --warmup >= 0 and --turns + --warmup <= {most} (turns per session)")
    if not Path("/proc/self/stat").exists():
        parser.error("this benchmark reads /proc and needs Linux")

    def logs(workdir: Path) -> str:
        return (
            f"{log_excerpt(workdir / 'server.log', 'parley log')}\n"
            f"{log_excerpt(workdir / 'fixture_http.log', 'HTTP fixture log')}"
        )

    return run_and_report(
        lambda workdir: run(args.turns, args.warmup, args.call_timeout, workdir), args.deadline, logs, report
    )


if __name__ == "__main__":
    sys.exit(main())
