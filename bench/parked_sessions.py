"""Many sessions parked on approvals over MCP streamable HTTP: memory, threads, database, resume rate.

Starts `parley serve --http --port 0` as a subprocess on a fresh SQLite file in a temporary
directory (default runtime settings) with one tool server under `mcp_servers:`, the fixture MCP
server of the tests (`tests/mcp_servers/fixture_server.py`) over stdio, and one agent file that
uses it. Every session is started with `/tool fixture__bare {"text": "<i>"}`: `bare` has no
annotations, so the call needs a person's approval and the turn parks (`waiting_for_input`, one
pending approval, no task or lease held). It measures:

- parking: sessions are started by a handful of concurrent mcp SDK clients until the total
  reaches each level (default 100, 500, 1000; levels are cumulative). At each level it reports
  the time to park the new sessions, the server's resident memory (VmRSS from
  /proc/<pid>/status) and its growth per parked session over a warmed-up baseline, the server's
  thread count, `/healthz` (running_turns, leased_sessions, downstream_connections), the size of
  the database, what the database says (sessions by status, pending approvals, leases held) and
  the server's CPU while idle with that many sessions parked;
- resuming: every parked session is approved (`approve`) by the same number of clients; each
  must resume and answer with the tool's result. It reports approvals per second and the same
  server figures afterwards, and checks in the fixture's call log that every approved call ran
  exactly once and that nothing ran before its approval.

Prints readable lines, then one final JSON line with every figure.

    .venv/bin/python bench/parked_sessions.py [--levels 100,500,1000] [--clients 8] [--deadline 1800]

The script talks only to 127.0.0.1 and to the subprocess it starts (and that subprocess's
children), stops by itself, and is bounded by --deadline (the whole run) and --call-timeout (each
tool call). At the end it stops the server with SIGTERM and reports its exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from _common import (
    HOST,
    Anomalies,
    add_limit_options,
    base_config,
    call,
    connect_read_only,
    cpu_seconds,
    db_bytes,
    fixture_over_stdio,
    has_anomalies,
    healthz,
    http_server,
    json_lines,
    latency_summary,
    loadavg_1m,
    mib,
    own_cpu_seconds,
    parse_level_list,
    percentile,
    proc_status,
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

AGENT = "bench"
SERVER = "fixture"
TOOL = f"{SERVER}__bare"  # no annotations: effect unclassified, approval required
MAX_SESSIONS = 10_000
MAX_CLIENTS = 64
# The largest wait_seconds the server honours (runtime.max_wait_s, default 55).
MAX_WAIT_S = 55.0


def child_pids(pid: int) -> list[int]:
    """The direct children of a process (e.g. the stdio tool server parley started)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return sorted(set(children))


def db_counts(db: Path) -> dict[str, Any]:
    """What the database says, read through a separate read-only connection (WAL: no writer waits)."""
    now = time.time()
    with connect_read_only(db) as conn:
        by_status = dict(conn.execute("SELECT status, count(*) FROM sessions GROUP BY status").fetchall())
        pending = conn.execute("SELECT count(*) FROM interrupts WHERE status = 'pending'").fetchone()[0]
        leases = conn.execute(
            "SELECT count(*) FROM sessions WHERE lease_owner IS NOT NULL AND lease_expires_at > ?", (now,)
        ).fetchone()[0]
    conn.close()
    return {"sessions_by_status": by_status, "pending_interrupts": pending, "leases_held": leases}


def write_config(directory: Path, fixture_log: Path) -> Path:
    """parley.yaml (fresh database, default runtime settings, the fixture over stdio) and one agent
    file that uses every tool of the fixture with the default approval policy."""
    agent = {
        "name": AGENT,
        "description": "Benchmark agent: the demo model with the fixture tool server.",
        "mcp_servers": [SERVER],
    }
    config = base_config(mcp_servers={SERVER: fixture_over_stdio(fixture_log)})
    return write_config_files(directory, config, [agent])


def short(outcome: dict[str, Any]) -> dict[str, Any]:
    """The fields of an outcome that say what went wrong, for an anomaly record."""
    keys = ("status", "session_status", "answer", "error", "pending")
    view = {k: outcome.get(k) for k in keys}
    view["tool_calls"] = [(c.get("tool"), c.get("status")) for c in outcome.get("tool_calls") or []]
    return view


def parked_symptom(outcome: dict[str, Any], index: int) -> str | None:
    """None when the session parked as expected: waiting on one approval of this call."""
    if outcome.get("status") != "waiting_for_input":
        return f"status {outcome.get('status')!r}, expected 'waiting_for_input'"
    if outcome.get("session_status") != "waiting_for_input":
        return f"session_status {outcome.get('session_status')!r}"
    pending = outcome.get("pending") or []
    if len(pending) != 1:
        return f"{len(pending)} pending entries, expected 1"
    entry = pending[0]
    if (entry.get("kind"), entry.get("tool"), entry.get("arguments")) != (
        "approval",
        TOOL,
        {"text": str(index)},
    ):
        return f"pending entry {entry!r}"
    calls = [(c.get("tool"), c.get("status")) for c in outcome.get("tool_calls") or []]
    if calls != [(TOOL, "pending_approval")]:
        return f"tool calls {calls!r}, expected one pending_approval"
    return None


def resumed_symptom(outcome: dict[str, Any], session_id: str, index: int) -> str | None:
    """None when the approved turn resumed, ran the call once and answered with its result."""
    if outcome.get("session_id") != session_id:
        return f"the outcome is for session {outcome.get('session_id')!r}"
    if outcome.get("status") != "answered":
        return f"status {outcome.get('status')!r}, expected 'answered'"
    # The demo model quotes each result as "<n>. <tool> (ok|error): <text>" on its own line.
    quoted = f"1. {TOOL} (ok): bare {index}"
    if quoted not in (outcome.get("answer") or "").splitlines():
        return f"answer {outcome.get('answer')!r} does not quote {quoted!r}"
    calls = [(c.get("tool"), c.get("status")) for c in outcome.get("tool_calls") or []]
    if calls != [(TOOL, "succeeded")]:
        return f"tool calls {calls!r}, expected one succeeded"
    return None


async def run_pool(
    url: str,
    server_pid: int,
    clients: int,
    jobs: list[Any],
    work: Callable[[Client, Any], Awaitable[float | None]],
) -> tuple[float, list[float], list[float], dict[str, float]]:
    """Run `work` on every job with `clients` concurrent mcp clients, each taking the next job as
    soon as it is free. Connecting is not timed. Returns (wall s, call ms list, connect ms list,
    the server's and this process's CPU seconds over the wall time)."""
    ready, go = anyio.Event(), anyio.Event()
    connected = 0
    jobs_left = iter(jobs)
    latencies_ms: list[float] = []
    connect_ms: list[float] = []

    async def worker() -> None:
        nonlocal connected
        t0 = time.perf_counter()
        async with Client(url) as client:
            connect_ms.append((time.perf_counter() - t0) * 1000)
            connected += 1
            if connected == min(clients, len(jobs)):
                ready.set()
            await go.wait()
            for job in jobs_left:  # one event loop: the shared iterator hands each job out once
                latency = await work(client, job)
                if latency is not None:
                    latencies_ms.append(latency)

    cpu: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        for _ in range(min(clients, len(jobs))):
            tg.start_soon(worker)
        await ready.wait()
        server_before, client_before = cpu_seconds(server_pid), own_cpu_seconds()
        start = time.perf_counter()
        go.set()
    wall_s = time.perf_counter() - start
    cpu["server_cpu_s"] = round(cpu_seconds(server_pid) - server_before, 3)
    cpu["client_cpu_s"] = round(own_cpu_seconds() - client_before, 3)
    return wall_s, latencies_ms, connect_ms, cpu


class Bench:
    def __init__(self, url: str, pid: int, workdir: Path, args: argparse.Namespace) -> None:
        self.url = url
        self.pid = pid
        self.workdir = workdir
        self.clients: int = args.clients
        self.call_timeout_s: float = args.call_timeout
        self.wait_s = min(MAX_WAIT_S, max(1.0, args.call_timeout - 5))
        self.idle_sample_s: float = args.idle_sample
        self.anomalies = Anomalies(args.max_anomalies, detail_key="outcome")
        # index -> (session id, interrupt id) of every session that parked as expected
        self.parked: dict[int, tuple[str, str]] = {}
        self.resumed: set[int] = set()
        self.started = 0  # sessions started so far (not counting the warm-up)

    async def park(self, client: Client, index: int, phase: str = "park") -> float | None:
        t0 = time.perf_counter()
        try:
            outcome = await call(
                client,
                self.call_timeout_s,
                "start_session",
                agent=AGENT,
                message=f'/tool {TOOL} {{"text": "{index}"}}',
                wait_seconds=self.wait_s,
            )
        except Exception as exc:
            self.anomalies.add(phase, f"start_session raised {exc!r}", index=index, session_id=None)
            return None
        elapsed_ms = (time.perf_counter() - t0) * 1000
        symptom = parked_symptom(outcome, index)
        if symptom is not None:
            self.anomalies.add(
                phase, symptom, short(outcome), index=index, session_id=outcome.get("session_id")
            )
            return elapsed_ms
        self.parked[index] = (str(outcome["session_id"]), str(outcome["pending"][0]["id"]))
        return elapsed_ms

    async def approve(self, client: Client, index: int, phase: str = "approve") -> float | None:
        session_id, interrupt_id = self.parked[index]
        t0 = time.perf_counter()
        try:
            outcome = await call(
                client,
                self.call_timeout_s,
                "approve",
                session_id=session_id,
                decisions=[{"interrupt_id": interrupt_id, "approved": True}],
                wait_seconds=self.wait_s,
            )
        except Exception as exc:
            self.anomalies.add(phase, f"approve raised {exc!r}", index=index, session_id=session_id)
            return None
        elapsed_ms = (time.perf_counter() - t0) * 1000
        symptom = resumed_symptom(outcome, session_id, index)
        if symptom is not None:
            self.anomalies.add(phase, symptom, short(outcome), index=index, session_id=session_id)
        else:
            self.resumed.add(index)
        return elapsed_ms

    async def snapshot(self, *, idle_cpu: bool) -> dict[str, Any]:
        """Server figures now: memory, threads, children, /healthz, database size and counts, and
        (optionally) the server's CPU over `idle_sample_s` seconds with no call in flight."""
        status = proc_status(self.pid)
        figures: dict[str, Any] = {
            "rss_kib": status["rss_kib"],
            "rss_mib": mib(status["rss_kib"]),
            "hwm_mib": mib(status["hwm_kib"]),
            "threads": status["threads"],
            "children": len(child_pids(self.pid)),
            "healthz": await healthz(self.url),
            **db_bytes(self.workdir),
            **(await anyio.to_thread.run_sync(db_counts, self.workdir / "parley.db")),
        }
        if idle_cpu:
            before = cpu_seconds(self.pid)
            await anyio.sleep(self.idle_sample_s)
            figures["idle_cpu_share"] = round((cpu_seconds(self.pid) - before) / self.idle_sample_s, 3)
        return figures

    async def warm_up(self, count: int) -> dict[str, Any]:
        """Park and approve `count` sessions one after another (the first connects to the fixture and
        lists its tools), so the baseline already holds the tool connection and warm code paths."""
        t0 = time.perf_counter()
        async with Client(self.url) as client:
            for k in range(count):
                index = -1 - k  # warm-up sessions have negative indexes
                await self.park(client, index, "warm-up park")
                if index in self.parked:
                    await self.approve(client, index, "warm-up approve")
                    del self.parked[index]
        return {"sessions": count, "wall_s": round(time.perf_counter() - t0, 3)}

    async def park_level(
        self, level: int, baseline: dict[str, Any], previous: dict[str, Any]
    ) -> dict[str, Any]:
        """Park sessions until `level` were started; `previous` is the last reading (or the baseline)."""
        parked_before = len(self.parked)
        indexes = list(range(self.started, level))
        self.started = level
        failed_before = self.anomalies.count["park"]
        wall_s, latencies_ms, connect_ms, cpu = await run_pool(
            self.url, self.pid, self.clients, indexes, self.park
        )
        figures = await self.snapshot(idle_cpu=True)
        parked_now = len(self.parked)
        grown_kib = figures["rss_kib"] - baseline["rss_kib"]
        return {
            "level": level,
            "new_sessions": len(indexes),
            "parked_total": parked_now,
            "not_parked": self.anomalies.count["park"] - failed_before,
            "park_wall_s": round(wall_s, 3),
            "parked_per_s": round(len(indexes) / wall_s, 1),
            "start_session": latency_summary(latencies_ms),
            **cpu,
            "server_cpu_ms_per_session": round(cpu["server_cpu_s"] / len(indexes) * 1000, 1),
            "server_cpu_share": round(cpu["server_cpu_s"] / wall_s, 2),
            "connect_p50_ms": round(percentile(connect_ms, 50), 2),
            "rss_growth_mib": mib(grown_kib),
            "rss_kib_per_parked_session": round(grown_kib / parked_now, 2) if parked_now else None,
            # marginal: growth since the previous reading over the sessions parked since then
            "rss_kib_per_new_session": round(
                (figures["rss_kib"] - previous["rss_kib"]) / max(1, parked_now - parked_before), 2
            ),
            **figures,
        }

    async def approve_all(self, baseline: dict[str, Any]) -> dict[str, Any]:
        indexes = sorted(self.parked)
        calls_before = len(json_lines(self.workdir / "fixture-calls.jsonl"))
        wall_s, latencies_ms, connect_ms, cpu = await run_pool(
            self.url, self.pid, self.clients, indexes, self.approve
        )
        figures = await self.snapshot(idle_cpu=True)
        return {
            "approved": len(indexes),
            "resumed": sum(1 for index in self.resumed if index >= 0),  # not the warm-up
            "approve_wall_s": round(wall_s, 3),
            "approvals_per_s": round(len(indexes) / wall_s, 1),
            "approve": latency_summary(latencies_ms),
            **cpu,
            "server_cpu_ms_per_approval": round(cpu["server_cpu_s"] / len(indexes) * 1000, 1),
            "server_cpu_share": round(cpu["server_cpu_s"] / wall_s, 2),
            "connect_p50_ms": round(percentile(connect_ms, 50), 2),
            "fixture_calls_during_approvals": len(json_lines(self.workdir / "fixture-calls.jsonl"))
            - calls_before,
            "rss_growth_mib": mib(figures["rss_kib"] - baseline["rss_kib"]),
            **figures,
        }


def check_fixture_log(calls: list[dict[str, Any]], bench: Bench, phase: str) -> dict[str, Any]:
    """Every approved call ran exactly once, with one idempotency key; nothing else ran."""
    texts = Counter(str(c["arguments"].get("text")) for c in calls if c["tool"] == "bare")
    keys = Counter(c["key"] for c in calls)
    expected = {str(i) for i in bench.resumed}
    twice = sorted(t for t, n in texts.items() if n > 1)
    unexpected = sorted(t for t in texts if t not in expected and not t.startswith("-"))
    missing = sorted(expected - set(texts))
    return {
        "phase": phase,
        "calls": len(calls),
        "other_tools": sorted({c["tool"] for c in calls} - {"bare"}),
        "ran_twice": twice[:20],
        "ran_but_not_seen_resumed": unexpected[:20],
        "approved_but_not_run": missing[:20],
        "repeated_keys": sum(1 for n in keys.values() if n > 1),
    }


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    fixture_log = workdir / "fixture-calls.jsonl"
    config = write_config(workdir, fixture_log)
    log = workdir / "server.log"
    load_before = loadavg_1m()
    started = time.perf_counter()
    async with http_server(workdir, config, log) as process:
        url = await wait_for_url(process, log)
        startup_s = time.perf_counter() - started
        bench = Bench(url, process.pid, workdir, args)
        idle = await bench.snapshot(idle_cpu=False)

        warm = await bench.warm_up(args.warmup)
        baseline = await bench.snapshot(idle_cpu=True)

        levels: list[dict[str, Any]] = []
        for level in args.levels:
            levels.append(await bench.park_level(level, baseline, levels[-1] if levels else baseline))
            print(f"  ... {level} parked ({levels[-1]['park_wall_s']:.1f} s)", file=sys.stderr, flush=True)
        log_after_parking = check_fixture_log(json_lines(fixture_log), bench, "after parking")
        if args.idle_hold > 0:  # sessions stay parked; does anything move meanwhile?
            await anyio.sleep(args.idle_hold)
        held = await bench.snapshot(idle_cpu=False)

        approvals = await bench.approve_all(baseline)
        log_after_approving = check_fixture_log(json_lines(fixture_log), bench, "after approving")

        stopped = await stop_server(process)

    return {
        "agent": AGENT,
        "tool": TOOL,
        "url_host": HOST,
        "clients": args.clients,
        "wait_seconds": bench.wait_s,
        "startup_s": round(startup_s, 3),
        "idle": idle,
        "warm_up": warm,
        "baseline": baseline,
        "levels": levels,
        "idle_hold_s": args.idle_hold,
        "after_hold": held,
        "fixture_log_after_parking": log_after_parking,
        "approvals": approvals,
        "fixture_log_after_approving": log_after_approving,
        "anomaly_counts": dict(bench.anomalies.count),
        "anomalies": bench.anomalies.kept,
        **stopped,
        **{f"after_exit_{k}": v for k, v in db_bytes(workdir).items()},
        **run_figures(started, load_before, "sqlite", "mcp", "pythonpath"),
    }


def server_line(s: dict[str, Any]) -> str:
    h = s["healthz"]
    return (
        f"RSS {s['rss_mib']:.1f} MiB (peak {s['hwm_mib']:.1f})   threads {s['threads']}"
        f"   children {s['children']}   healthz running_turns {h.get('running_turns')}"
        f" leased_sessions {h.get('leased_sessions')} downstream_connections {h.get('downstream_connections')}"
    )


def db_line(s: dict[str, Any]) -> str:
    idle = f"   idle CPU {s['idle_cpu_share']:.3f} of one core" if "idle_cpu_share" in s else ""
    return (
        f"db {s['db_bytes']:,} B + wal {s['wal_bytes']:,} B   sessions {s['sessions_by_status']}"
        f"   pending approvals {s['pending_interrupts']}   leases held {s['leases_held']}{idle}"
    )


def report(r: dict[str, Any]) -> None:
    print(
        f"parley parked sessions: '{r['agent']}' agent, {r['tool']} (needs approval) over MCP"
        f" streamable HTTP on {r['url_host']}, {r['clients']} concurrent clients"
    )
    print(f"  server start until listening  {r['startup_s']:.3f} s")
    print(f"  at start-up       {server_line(r['idle'])}")
    print(
        f"  warm-up sessions parked and approved: {r['warm_up']['sessions']} in {r['warm_up']['wall_s']:.3f} s"
    )
    print(f"  baseline          {server_line(r['baseline'])}")
    print(f"                    {db_line(r['baseline'])}")
    for lv in r["levels"]:
        sl = lv["start_session"]
        print(
            f"  {lv['level']:>5} parked: +{lv['new_sessions']} in {lv['park_wall_s']:.3f} s"
            f" ({lv['parked_per_s']:.1f}/s)   start_session p50 {sl['p50_ms']} ms p95 {sl['p95_ms']} ms"
            f" max {sl['max_ms']} ms   not parked {lv['not_parked']}"
        )
        print(
            f"        server CPU {lv['server_cpu_s']:.3f} s ({lv['server_cpu_ms_per_session']} ms per session,"
            f" {lv['server_cpu_share']} of one core)   client CPU {lv['client_cpu_s']:.3f} s"
        )
        print(
            f"        RSS +{lv['rss_growth_mib']:.1f} MiB over baseline"
            f" = {lv['rss_kib_per_parked_session']} KiB per parked session"
            f"   (since the previous reading: {lv['rss_kib_per_new_session']} KiB per new one)"
        )
        print(f"        {server_line(lv)}")
        print(f"        {db_line(lv)}")
    print(f"  after {r['idle_hold_s']} s more parked: {server_line(r['after_hold'])}")
    a = r["approvals"]
    print(
        f"  approve all: {a['approved']} in {a['approve_wall_s']:.3f} s ({a['approvals_per_s']:.1f}/s)"
        f"   approve p50 {a['approve']['p50_ms']} ms p95 {a['approve']['p95_ms']} ms max {a['approve']['max_ms']} ms"
        f"   resumed and answered {a['resumed']}"
    )
    print(
        f"        server CPU {a['server_cpu_s']:.3f} s ({a['server_cpu_ms_per_approval']} ms per approval,"
        f" {a['server_cpu_share']} of one core)   client CPU {a['client_cpu_s']:.3f} s"
    )
    print(f"        RSS +{a['rss_growth_mib']:.1f} MiB over baseline   {server_line(a)}")
    print(f"        {db_line(a)}")
    for key in ("fixture_log_after_parking", "fixture_log_after_approving"):
        f = r[key]
        print(
            f"  fixture log {f['phase']}: {f['calls']} calls, ran twice {f['ran_twice']},"
            f" ran but not seen resumed {f['ran_but_not_seen_resumed']},"
            f" approved but not run {f['approved_but_not_run']}, repeated keys {f['repeated_keys']}"
        )
    print(f"  anomalies {r['anomaly_counts'] or 'none'}")
    for anomaly in r["anomalies"][:10]:
        print(f"    {anomaly}")
    print(f"  {sigterm_line(r)}")
    print(
        f"  after exit: db {r['after_exit_db_bytes']:,} B, wal {r['after_exit_wal_bytes']:,} B"
        f"   total wall time {r['total_wall_s']:.3f} s"
    )
    print(
        f"  machine nproc {r['nproc']}, Python {r['python']}, SQLite {r['sqlite']}, mcp {r['mcp']};"
        f" 1-minute load average before {r['loadavg_1m_before']}, after {r['loadavg_1m_after']}"
    )
    print(json.dumps(r, sort_keys=True))


def parse_levels(text: str) -> list[int]:
    levels = parse_level_list(text, MAX_SESSIONS, "100,500,1000")
    if levels != sorted(set(levels)):
        raise argparse.ArgumentTypeError("levels are cumulative totals and must increase, e.g. 100,500,1000")
    return levels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--levels",
        type=parse_levels,
        default=[100, 500, 1000],
        help="total parked sessions at each measurement, increasing (100,500,1000)",
    )
    parser.add_argument("--clients", type=int, default=8, help=f"concurrent MCP clients (1..{MAX_CLIENTS})")
    parser.add_argument(
        "--warmup", type=int, default=3, help="sessions parked and approved before the baseline"
    )
    parser.add_argument(
        "--idle-sample", type=float, default=5.0, help="seconds of idle server CPU per reading"
    )
    parser.add_argument("--idle-hold", type=float, default=10.0, help="seconds to keep them all parked")
    parser.add_argument("--max-anomalies", type=int, default=20, help="give up after this many anomalies")
    add_limit_options(parser, 1800.0)
    args = parser.parse_args()
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients must be 1..{MAX_CLIENTS}")
    if args.warmup < 1:
        parser.error("--warmup must be at least 1 (the baseline needs the tool connection open)")
    if args.idle_sample <= 0 or args.idle_hold < 0 or args.max_anomalies < 0:
        parser.error("--idle-sample must be positive; --idle-hold and --max-anomalies not negative")
    require_linux(parser)

    return run_and_report(
        lambda workdir: run(args, workdir), args.deadline, server_log_excerpt, report, has_anomalies
    )


if __name__ == "__main__":
    sys.exit(main())
