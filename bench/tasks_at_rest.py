"""Many open MCP tasks at rest over streamable HTTP: memory, idle CPU, database, tasks/get rate.

Starts `parley serve --http --port 0` as a subprocess on a fresh SQLite file in a temporary
directory (default runtime and tasks settings) with one agent file, `bench` (the demo model with
`ask_user`). For every session it calls `start_session(agent="bench")` without a message, then
`send_message` as an MCP task with `/ask Which colour? | red | blue` (the turn asks a question
and parks: the task is `input_required`), then more `send_message` tasks with plain text that
queue behind the parked turn (the tasks are `working`, and no turn runs for them). So no turn
runs once the question turns have parked: the tasks are at rest. It measures:

- creating the tasks: wall time, tasks per second, the latency of each kind of call;
- the server's resident memory (VmRSS from /proc/<pid>/status) before the tasks (after one
  warm-up session) and with all of them open, its threads, `/healthz` (running_turns,
  leased_sessions), the database size and what the database says (tasks by status, pending
  questions, queued messages, leases held);
- the server's CPU while nothing happens, over `--idle-sample` seconds: with the creating
  clients still connected (2025-11-25 tasks are watched for status notifications), after they
  disconnected, and at the end;
- `tasks/get` throughput: first one pass over every task (each status checked), then for each
  concurrency level C (default 1, 8, 32) C clients, each with its own connection, loop over
  random task ids for `--duration` seconds. It reports requests per second and p50/p95/max, and
  checks every answer's task id and status.

Prints readable lines, then one final JSON line with every figure.

    .venv/bin/python bench/tasks_at_rest.py [--sessions 1000] [--tasks-per-session 10] [--levels 1,8,32]

The script talks only to 127.0.0.1 and to the subprocess it starts, stops by itself, and is
bounded by --deadline (the whole run) and --call-timeout (each request). At the end it stops the
server with SIGTERM and reports its exit code.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from _common import (
    HOST,
    Anomalies,
    add_limit_options,
    base_config,
    connect_read_only,
    cpu_seconds,
    db_bytes,
    has_anomalies,
    healthz,
    http_server,
    latency_summary,
    loadavg_1m,
    log_counts,
    mib,
    own_cpu_seconds,
    parley_module,
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
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value

from parley.sdk_compat import send_raw_request

AGENT = "bench"
LEGACY = "2025-11-25"  # core tasks: `task` on tools/call
MODERN = "2026-07-28"  # the io.modelcontextprotocol/tasks extension
GENERATIONS = {"legacy": LEGACY, "modern": MODERN}
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
ASK = "/ask Which colour? | red | blue"
# The demo agent allows 1000 turns per session (limits.max_turns), and queued messages count.
MAX_TURNS = 1000
MAX_SESSIONS = 100_000
MAX_CLIENTS = 256
TASK_TTL_MS = 86_400_000  # one day: no task expires during a run


def db_counts(db: Path) -> dict[str, Any]:
    """What the database says, read through a separate read-only connection (WAL: no writer waits)."""
    now = time.time()
    with connect_read_only(db) as conn:
        tasks = dict(conn.execute("SELECT status, count(*) FROM tasks GROUP BY status").fetchall())
        generations = dict(conn.execute("SELECT generation, count(*) FROM tasks GROUP BY generation"))
        sessions = dict(conn.execute("SELECT status, count(*) FROM sessions GROUP BY status").fetchall())
        pending = conn.execute("SELECT count(*) FROM interrupts WHERE status = 'pending'").fetchone()[0]
        queued = conn.execute("SELECT count(*) FROM queued_messages WHERE status = 'queued'").fetchone()[0]
        leases = conn.execute(
            "SELECT count(*) FROM sessions WHERE lease_owner IS NOT NULL AND lease_expires_at > ?", (now,)
        ).fetchone()[0]
        expired = conn.execute(
            "SELECT count(*) FROM tasks WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
        ).fetchone()[0]
    conn.close()
    return {
        "tasks_by_status": tasks,
        "tasks_by_generation": generations,
        "tasks_expired": expired,
        "sessions_by_status": sessions,
        "pending_interrupts": pending,
        "queued_messages": queued,
        "leases_held": leases,
    }


def db_task_statuses(db: Path) -> dict[str, str]:
    """Every task's stored status, by id (read-only connection)."""
    with connect_read_only(db) as conn:
        rows = dict(conn.execute("SELECT id, status FROM tasks").fetchall())
    conn.close()
    return rows


def write_config(directory: Path, max_watched: int | None) -> Path:
    """parley.yaml (fresh database, default runtime and tasks settings unless --max-watched) and
    one agent file: the demo model with ask_user."""
    tasks: dict[str, Any] = {} if max_watched is None else {"max_watched": max_watched}
    agent = {
        "name": AGENT,
        "description": "Benchmark agent: the demo model with ask_user.",
        "tools": ["ask_user"],
    }
    return write_config_files(directory, base_config(tasks=tasks), [agent])


def connect(url: str, generation: str) -> Client:
    """A client of one generation: 2025-11-25 through the legacy handshake, else the default mode."""
    return Client(url, mode="legacy") if generation == "legacy" else Client(url)


async def raw_request(
    client: Client, method: str, params: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Send a request below the SDK's typed layer and return its result dict unvalidated.

    The SDK (2.3) has no client side for tasks. Private API, through
    parley.sdk_compat.send_raw_request: the request carries what a typed request would (the
    `MCP-Protocol-Version` header; on 2026-07-28 the `_meta` envelope and the
    `Mcp-Method`/`Mcp-Name` headers). On 2026-07-28 the tasks extension is added to this request's
    client capabilities, and a `tasks/*` request names its task in `Mcp-Name`, as the tests'
    task client does. A JSON-RPC error is raised as `MCPError`."""
    session = client.session

    def edit(stamped: dict[str, Any], headers: dict[str, str]) -> None:
        if session.protocol_version != MODERN:
            return
        meta = stamped["_meta"]
        capabilities = copy.deepcopy(meta.get(CAPABILITIES_META) or {})
        capabilities["extensions"] = {**(capabilities.get("extensions") or {}), TASKS_EXTENSION: {}}
        meta[CAPABILITIES_META] = capabilities
        if method.startswith("tasks/"):
            headers[MCP_NAME_HEADER] = encode_header_value(params["taskId"])

    return await send_raw_request(session, method, params, {"timeout": timeout_s}, edit=edit)


def task_of(generation: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """The task a task-augmented tools/call created: {taskId, status, ...}, or None."""
    if generation == "legacy":
        task = result.get("task")
        return dict(task) if isinstance(task, dict) and task.get("taskId") else None
    return dict(result) if result.get("resultType") == "task" and result.get("taskId") else None


class Bench:
    def __init__(self, url: str, pid: int, workdir: Path, args: argparse.Namespace) -> None:
        self.url = url
        self.pid = pid
        self.workdir = workdir
        self.args = args
        self.timeout_s: float = args.call_timeout
        self.anomalies = Anomalies(args.max_anomalies)
        # task id -> the status it must show at rest (input_required or working)
        self.expected: dict[str, str] = {}
        self.session_ids: list[str] = []
        self.create_ms: dict[str, list[float]] = {"start_session": [], "ask": [], "queued": []}

    # ------------------------------------------------------------------ creating

    async def call_tool(self, client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(tool, arguments, read_timeout_seconds=self.timeout_s)
        if result.is_error or result.structured_content is None:
            text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
            raise RuntimeError(f"{tool} failed: {text}")
        return dict(result.structured_content)

    async def create_task(
        self, client: Client, generation: str, tool: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if generation == "legacy":
            params["task"] = {"ttl": TASK_TTL_MS}
        result = await raw_request(client, "tools/call", params, self.timeout_s)
        task = task_of(generation, result)
        if task is None:
            raise RuntimeError(f"tools/call {tool} made no task: {json.dumps(result)[:500]}")
        return task

    async def fill_session(self, client: Client, generation: str, index: int) -> list[str]:
        """One session: a question task (parks) and tasks_per_session - 1 queued-message tasks."""
        t0 = time.perf_counter()
        outcome = await self.call_tool(client, "start_session", {"agent": AGENT})
        self.create_ms["start_session"].append((time.perf_counter() - t0) * 1000)
        if outcome.get("status") != "idle" or not outcome.get("session_id"):
            self.anomalies.add("create", f"start_session answered {outcome.get('status')!r}", outcome)
            return []
        session_id = str(outcome["session_id"])
        self.session_ids.append(session_id)
        made: list[str] = []
        for k in range(self.args.tasks_per_session):
            kind = "ask" if k == 0 else "queued"
            message = ASK if k == 0 else f"queued message {k} of session {index}"
            t0 = time.perf_counter()
            try:
                task = await self.create_task(
                    client, generation, "send_message", {"session_id": session_id, "message": message}
                )
            except Exception as exc:
                self.anomalies.add("create", f"send_message as a task raised {exc!r}", {"session": index})
                continue
            self.create_ms[kind].append((time.perf_counter() - t0) * 1000)
            allowed = {"working", "input_required"} if kind == "ask" else {"working"}
            if task.get("status") not in allowed:
                self.anomalies.add("create", f"a new {kind} task is {task.get('status')!r}", task)
            self.expected[str(task["taskId"])] = "input_required" if kind == "ask" else "working"
            made.append(str(task["taskId"]))
        return made

    async def create_all(self, generation: str) -> dict[str, Any]:
        """Fill every session with `clients` concurrent clients; report while they are still
        connected (idle CPU with their watchers), then let them go and report again."""
        clients = min(self.args.clients, self.args.sessions)
        jobs = iter(range(self.args.sessions))
        ready, go, release = anyio.Event(), anyio.Event(), anyio.Event()
        connected = done = disconnected = 0
        all_done = anyio.Event()

        async def worker() -> None:
            nonlocal connected, done, disconnected
            async with connect(self.url, generation) as client:
                if generation == "modern":
                    await client.list_tools()  # so the SDK mirrors x-mcp-header arguments into headers
                connected += 1
                if connected == clients:
                    ready.set()
                await go.wait()
                for index in jobs:  # one event loop: the shared iterator hands each job out once
                    try:
                        await self.fill_session(client, generation, index)
                    except Exception as exc:
                        self.anomalies.add("create", f"session {index}: {exc!r}")
                done += 1
                if done == clients:
                    all_done.set()
                await release.wait()  # stay connected until the idle reading is taken
            disconnected += 1

        figures: dict[str, Any] = {"generation": generation, "clients": clients}
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(worker)
            await ready.wait()
            server_before, client_before = cpu_seconds(self.pid), own_cpu_seconds()
            t0 = time.perf_counter()
            go.set()
            await all_done.wait()
            wall_s = time.perf_counter() - t0
            figures.update(
                tasks=len(self.expected),
                wall_s=round(wall_s, 3),
                tasks_per_s=round(len(self.expected) / wall_s, 1),
                server_cpu_s=round(cpu_seconds(self.pid) - server_before, 3),
                client_cpu_s=round(own_cpu_seconds() - client_before, 3),
                **{f"{kind}_latency": latency_summary(ms) for kind, ms in self.create_ms.items()},
            )
            figures["server_cpu_ms_per_task"] = round(
                figures["server_cpu_s"] / max(1, len(self.expected)) * 1000, 2
            )
            figures["settle_s"] = round(await self.settle(), 3)
            figures["connected"] = await self.snapshot(idle_cpu=True)
            release.set()
        figures["disconnected_clients"] = disconnected
        await anyio.sleep(1.0)  # let the server notice the closed connections
        figures["after_disconnect"] = await self.snapshot(idle_cpu=True)
        return figures

    async def settle(self) -> float:
        """Wait until every question turn has parked: no turn running, every session waiting."""
        t0 = time.perf_counter()
        with anyio.fail_after(self.args.settle_timeout):
            while True:
                health = await healthz(self.url)
                counts = await anyio.to_thread.run_sync(db_counts, self.workdir / "parley.db")
                waiting = counts["sessions_by_status"].get("waiting_for_input", 0)
                if health.get("running_turns") == 0 and waiting >= len(self.session_ids):
                    return time.perf_counter() - t0
                await anyio.sleep(0.2)

    # ------------------------------------------------------------------ reading

    def check(self, generation: str, task_id: str, task: dict[str, Any], phase: str) -> bool:
        expected = self.expected[task_id]
        if task.get("taskId") != task_id:
            self.anomalies.add(phase, f"tasks/get {task_id} answered for {task.get('taskId')!r}")
            return False
        if task.get("status") != expected:
            detail = {k: task.get(k) for k in ("taskId", "status", "statusMessage")}
            self.anomalies.add(phase, f"status {task.get('status')!r}, expected {expected!r}", detail)
            return False
        if (
            generation == "modern"
            and expected == "input_required"
            and len(task.get("inputRequests") or {}) != 1
        ):
            self.anomalies.add(phase, f"{len(task.get('inputRequests') or {})} input requests, expected 1")
            return False
        return True

    async def get_pass(self, generation: str) -> dict[str, Any]:
        """tasks/get every task once, `clients` at a time, checking each status."""
        ids = list(self.expected)
        jobs = iter(ids)
        latencies: list[float] = []
        ok = 0

        async def worker() -> None:
            nonlocal ok
            async with connect(self.url, generation) as client:
                for task_id in jobs:
                    t0 = time.perf_counter()
                    try:
                        task = await raw_request(client, "tasks/get", {"taskId": task_id}, self.timeout_s)
                    except Exception as exc:
                        self.anomalies.add("pass", f"tasks/get {task_id} raised {exc!r}")
                        continue
                    latencies.append((time.perf_counter() - t0) * 1000)
                    ok += self.check(generation, task_id, task, "pass")

        server_before = cpu_seconds(self.pid)
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(min(self.args.clients, len(ids))):
                tg.start_soon(worker)
        wall_s = time.perf_counter() - t0
        return {
            "generation": generation,
            "tasks": len(ids),
            "as_expected": ok,
            "wall_s": round(wall_s, 3),
            "per_s": round(len(ids) / wall_s, 1),
            "latency": latency_summary(latencies),
            "server_cpu_s": round(cpu_seconds(self.pid) - server_before, 3),
        }

    async def get_level(self, generation: str, level: int) -> dict[str, Any]:
        """`level` clients loop over random task ids for --duration seconds."""
        ids = list(self.expected)
        ready, go = anyio.Event(), anyio.Event()
        connected = 0
        latencies: list[float] = []
        connect_ms: list[float] = []
        counts: Counter[str] = Counter()
        stop_at = math.inf

        async def worker(k: int) -> None:
            nonlocal connected
            rng = random.Random(f"{self.args.seed}/{generation}/{level}/{k}")
            t0 = time.perf_counter()
            async with connect(self.url, generation) as client:
                connect_ms.append((time.perf_counter() - t0) * 1000)
                connected += 1
                if connected == level:
                    ready.set()
                await go.wait()
                while time.perf_counter() < stop_at:
                    task_id = rng.choice(ids)
                    t1 = time.perf_counter()
                    try:
                        task = await raw_request(client, "tasks/get", {"taskId": task_id}, self.timeout_s)
                    except Exception as exc:
                        counts["errors"] += 1
                        self.anomalies.add(f"get x{level}", f"tasks/get {task_id} raised {exc!r}")
                        continue
                    latencies.append((time.perf_counter() - t1) * 1000)
                    counts["requests"] += 1
                    if self.check(generation, task_id, task, f"get x{level}"):
                        counts["as_expected"] += 1

        async with anyio.create_task_group() as tg:
            for k in range(level):
                tg.start_soon(worker, k)
            await ready.wait()
            server_before, client_before = cpu_seconds(self.pid), own_cpu_seconds()
            t0 = time.perf_counter()
            stop_at = t0 + self.args.duration
            go.set()
        wall_s = time.perf_counter() - t0  # until the last request in flight at the stop has answered
        server_cpu = cpu_seconds(self.pid) - server_before
        health = await healthz(self.url)
        return {
            "generation": generation,
            "clients": level,
            "requests": counts["requests"],
            "as_expected": counts["as_expected"],
            "errors": counts["errors"],
            "wall_s": round(wall_s, 3),
            "per_s": round(counts["requests"] / wall_s, 1),
            "latency": latency_summary(latencies),
            "server_cpu_s": round(server_cpu, 3),
            "server_cpu_share": round(server_cpu / wall_s, 2),
            "server_cpu_ms_per_get": round(server_cpu / max(1, counts["requests"]) * 1000, 3),
            "client_cpu_s": round(own_cpu_seconds() - client_before, 3),
            "connect_p50_ms": round(percentile(connect_ms, 50), 2),
            "healthz_running_turns": health.get("running_turns"),
        }

    # ------------------------------------------------------------------ the server

    async def snapshot(self, *, idle_cpu: bool) -> dict[str, Any]:
        """Server figures now: memory, threads, /healthz, database size and counts, and
        (optionally) the server's CPU over --idle-sample seconds with no request in flight."""
        status = proc_status(self.pid)
        health = await healthz(self.url)
        figures: dict[str, Any] = {
            "rss_kib": status["rss_kib"],
            "rss_mib": mib(status["rss_kib"]),
            "hwm_mib": mib(status["hwm_kib"]),
            "threads": status["threads"],
            "healthz": {
                k: health.get(k) for k in ("running_turns", "leased_sessions", "downstream_connections")
            },
            **db_bytes(self.workdir),
            **(await anyio.to_thread.run_sync(db_counts, self.workdir / "parley.db")),
        }
        if idle_cpu:
            before = cpu_seconds(self.pid)
            t0 = time.perf_counter()
            await anyio.sleep(self.args.idle_sample)
            elapsed = time.perf_counter() - t0
            figures["idle_cpu_share"] = round((cpu_seconds(self.pid) - before) / elapsed, 3)
        return figures

    async def warm_up(self, generation: str) -> dict[str, Any]:
        """One session filled like the others, each task read once, then the session closed (its
        tasks end), so the baseline already has the warm code paths. Its tasks are not counted."""
        t0 = time.perf_counter()
        async with connect(self.url, generation) as client:
            if generation == "modern":
                await client.list_tools()
            made = await self.fill_session(client, generation, -1)
            session_id = self.session_ids.pop()
            await self.settle_one(client, made)
            await self.call_tool(client, "close_session", {"session_id": session_id})
            ended = 0
            for task_id in made:
                del self.expected[task_id]
                task = await raw_request(client, "tasks/get", {"taskId": task_id}, self.timeout_s)
                ended += task.get("status") in TERMINAL
        for samples in self.create_ms.values():
            samples.clear()
        return {"tasks": len(made), "ended_after_close": ended, "wall_s": round(time.perf_counter() - t0, 3)}

    async def settle_one(self, client: Client, made: list[str]) -> None:
        """Poll the warm-up's question task until it asks (bounded by --settle-timeout)."""
        with anyio.fail_after(self.args.settle_timeout):
            while True:
                task = await raw_request(client, "tasks/get", {"taskId": made[0]}, self.timeout_s)
                if task.get("status") == "input_required":
                    for task_id in made[1:]:
                        await raw_request(client, "tasks/get", {"taskId": task_id}, self.timeout_s)
                    return
                await anyio.sleep(0.1)


def check_database(bench: Bench) -> dict[str, Any]:
    """Our tasks exist, none has ended; the stored status of each (it is stored when somebody
    looks and it changed, so an unread question task may still say working)."""
    stored = db_task_statuses(bench.workdir / "parley.db")
    ours = [stored.get(task_id) for task_id in bench.expected]
    return {
        "tasks_created": len(bench.expected),
        "found": sum(1 for s in ours if s is not None),
        "terminal": sum(1 for s in ours if s in TERMINAL),
        "stored_status": dict(Counter(s or "missing" for s in ours)),
        "other_tasks": len(stored) - sum(1 for s in ours if s is not None),
    }


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    config = write_config(workdir, args.max_watched)
    log = workdir / "server.log"
    load_before = loadavg_1m()
    module = await anyio.to_thread.run_sync(parley_module, workdir)
    started = time.perf_counter()
    async with http_server(workdir, config, log) as process:
        url = await wait_for_url(process, log)
        startup_s = time.perf_counter() - started
        bench = Bench(url, process.pid, workdir, args)
        idle = await bench.snapshot(idle_cpu=False)
        warm = await bench.warm_up(args.create_generation)
        baseline = await bench.snapshot(idle_cpu=True)

        creation = await bench.create_all(args.create_generation)
        print(
            f"  ... {creation['tasks']} tasks created ({creation['wall_s']:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        database = await anyio.to_thread.run_sync(check_database, bench)
        if database["found"] != database["tasks_created"] or database["terminal"]:
            bench.anomalies.add("database", "tasks missing or ended before measuring", database)
        at_rest = creation["after_disconnect"]
        if at_rest["healthz"]["running_turns"] != 0:
            bench.anomalies.add("database", f"healthz running_turns {at_rest['healthz']['running_turns']}")

        passes, levels = [], []
        for generation in args.get_generations:
            passes.append(await bench.get_pass(generation))
            for level in args.levels:
                levels.append(await bench.get_level(generation, level))
                lv = levels[-1]
                print(f"  ... tasks/get {generation} x{level}: {lv['per_s']}/s", file=sys.stderr, flush=True)
        final = await bench.snapshot(idle_cpu=True)
        database_final = await anyio.to_thread.run_sync(check_database, bench)
        stopped = await stop_server(process)

    total = len(bench.expected)
    return {
        "agent": AGENT,
        "url_host": HOST,
        "sessions": args.sessions,
        "tasks_per_session": args.tasks_per_session,
        "create_generation": args.create_generation,
        "max_watched": args.max_watched,
        "idle_sample_s": args.idle_sample,
        "duration_s": args.duration,
        "startup_s": round(startup_s, 3),
        "idle": idle,
        "warm_up": warm,
        "baseline": baseline,
        "creation": creation,
        "database": database,
        "rss_kib_per_task_connected": round(
            (creation["connected"]["rss_kib"] - baseline["rss_kib"]) / max(1, total), 3
        ),
        "rss_kib_per_task_at_rest": round((at_rest["rss_kib"] - baseline["rss_kib"]) / max(1, total), 3),
        "get_passes": passes,
        "get_levels": levels,
        "final": final,
        "database_final": database_final,
        "anomaly_counts": dict(bench.anomalies.count),
        "anomalies": bench.anomalies.kept,
        **stopped,
        **{f"after_exit_{k}": v for k, v in db_bytes(workdir).items()},
        "server_log": log_counts(log),
        **run_figures(started, load_before, "sqlite", "mcp", "pythonpath"),
        "parley_module": module,
    }


def server_line(s: dict[str, Any]) -> str:
    h = s["healthz"]
    idle = f"   idle CPU {s['idle_cpu_share']:.3f} of one core" if "idle_cpu_share" in s else ""
    return (
        f"RSS {s['rss_mib']:.1f} MiB (peak {s['hwm_mib']:.1f})   threads {s['threads']}"
        f"   healthz running_turns {h['running_turns']} leased_sessions {h['leased_sessions']}{idle}"
    )


def db_line(s: dict[str, Any]) -> str:
    return (
        f"db {s['db_bytes']:,} B + wal {s['wal_bytes']:,} B   tasks {s['tasks_by_status']}"
        f"   sessions {s['sessions_by_status']}   pending questions {s['pending_interrupts']}"
        f"   queued messages {s['queued_messages']}   leases held {s['leases_held']}"
    )


def report(r: dict[str, Any]) -> None:
    print(
        f"parley tasks at rest: {r['sessions']} sessions x {r['tasks_per_session']} tasks"
        f" (1 question + {r['tasks_per_session'] - 1} queued), created as {r['create_generation']} tasks"
        f" over MCP streamable HTTP on {r['url_host']}; tasks.max_watched"
        f" {'default' if r['max_watched'] is None else r['max_watched']}"
    )
    print(f"  server start until listening  {r['startup_s']:.3f} s   (imports {r['parley_module']})")
    print(f"  at start-up        {server_line(r['idle'])}")
    w = r["warm_up"]
    print(f"  warm-up session: {w['tasks']} tasks, {w['ended_after_close']} ended after close_session")
    print(f"  baseline           {server_line(r['baseline'])}")
    print(f"                     {db_line(r['baseline'])}")
    c = r["creation"]
    print(
        f"  created {c['tasks']} tasks in {c['wall_s']:.3f} s ({c['tasks_per_s']}/s) with {c['clients']} clients;"
        f" server CPU {c['server_cpu_s']:.3f} s ({c['server_cpu_ms_per_task']} ms per task),"
        f" client CPU {c['client_cpu_s']:.3f} s; settled {c['settle_s']:.3f} s later"
    )
    for kind in ("start_session", "ask", "queued"):
        lat = c[f"{kind}_latency"]
        print(f"        {kind:<14} p50 {lat['p50_ms']} ms  p95 {lat['p95_ms']} ms  max {lat['max_ms']} ms")
    print(f"  creators connected {server_line(c['connected'])}")
    print(f"                     {db_line(c['connected'])}")
    print(f"  creators gone      {server_line(c['after_disconnect'])}")
    print(f"                     {db_line(c['after_disconnect'])}")
    print(
        f"  RSS per open task: {r['rss_kib_per_task_connected']} KiB (creators connected),"
        f" {r['rss_kib_per_task_at_rest']} KiB (creators gone)"
    )
    d = r["database"]
    print(
        f"  database check: {d['found']} of {d['tasks_created']} tasks found, {d['terminal']} ended,"
        f" stored status {d['stored_status']}, other tasks {d['other_tasks']}"
    )
    for p in r["get_passes"]:
        lat = p["latency"]
        print(
            f"  tasks/get {p['generation']}, every task once: {p['as_expected']} of {p['tasks']} as expected"
            f" in {p['wall_s']:.3f} s ({p['per_s']}/s)  p50 {lat['p50_ms']} ms p95 {lat['p95_ms']} ms"
        )
    for lv in r["get_levels"]:
        lat = lv["latency"]
        print(
            f"  tasks/get {lv['generation']:<6} x{lv['clients']:<3} {lv['per_s']:>8}/s   p50 {lat['p50_ms']} ms"
            f"  p95 {lat['p95_ms']} ms  max {lat['max_ms']} ms   {lv['as_expected']} of {lv['requests']} as"
            f" expected, {lv['errors']} errors   server CPU {lv['server_cpu_share']} of one core"
            f" ({lv['server_cpu_ms_per_get']} ms per get)   client CPU {lv['client_cpu_s']:.3f} s"
        )
    print(f"  at the end         {server_line(r['final'])}")
    print(f"                     {db_line(r['final'])}")
    print(f"  anomalies {r['anomaly_counts'] or 'none'}")
    for anomaly in r["anomalies"][:10]:
        print(f"    {anomaly}")
    print(f"  {sigterm_line(r)}")
    print(
        f"  after exit: db {r['after_exit_db_bytes']:,} B, wal {r['after_exit_wal_bytes']:,} B;"
        f" server log {r['server_log']}   total wall time {r['total_wall_s']:.3f} s"
    )
    print(
        f"  machine nproc {r['nproc']}, Python {r['python']}, SQLite {r['sqlite']}, mcp {r['mcp']};"
        f" 1-minute load average before {r['loadavg_1m_before']}, after {r['loadavg_1m_after']}"
    )
    print(json.dumps(r, sort_keys=True))


def parse_list(text: str, allowed: set[str] | None = None) -> list[str]:
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items or (allowed is not None and not set(items) <= allowed):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {sorted(allowed or [])}")
    return items


def parse_levels(text: str) -> list[int]:
    return parse_level_list(text, MAX_CLIENTS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000, help="parked sessions (1000)")
    parser.add_argument(
        "--tasks-per-session",
        type=int,
        default=10,
        help="tasks per session: 1 question + the rest queued (10)",
    )
    parser.add_argument(
        "--create-generation",
        choices=sorted(GENERATIONS),
        default="legacy",
        help="make the tasks as 2025-11-25 tasks (legacy, watched) or 2026-07-28 tasks (modern)",
    )
    parser.add_argument("--clients", type=int, default=8, help="clients creating tasks (and for the pass)")
    parser.add_argument(
        "--get-generations",
        type=lambda t: parse_list(t, set(GENERATIONS)),
        default=["legacy", "modern"],
        help="generations whose tasks/get is measured (legacy,modern)",
    )
    parser.add_argument("--levels", type=parse_levels, default=[1, 8, 32], help="tasks/get clients (1,8,32)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of tasks/get per level")
    parser.add_argument(
        "--idle-sample", type=float, default=10.0, help="seconds of idle server CPU per reading"
    )
    parser.add_argument("--max-watched", type=int, default=None, help="tasks.max_watched (default: unset)")
    parser.add_argument("--settle-timeout", type=float, default=120.0, help="seconds for turns to park")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random task ids")
    parser.add_argument("--max-anomalies", type=int, default=20, help="give up after this many anomalies")
    add_limit_options(parser, 1800.0, call="request")
    args = parser.parse_args()
    if not 1 <= args.sessions <= MAX_SESSIONS:
        parser.error(f"--sessions must be 1..{MAX_SESSIONS}")
    if not 1 <= args.tasks_per_session <= MAX_TURNS:
        parser.error(f"--tasks-per-session must be 1..{MAX_TURNS} (turns a session allows)")
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients must be 1..{MAX_CLIENTS}")
    if args.duration <= 0 or args.idle_sample <= 0 or args.settle_timeout <= 0 or args.max_anomalies < 0:
        parser.error("--duration, --idle-sample and --settle-timeout must be positive")
    require_linux(parser)

    return run_and_report(
        lambda workdir: run(args, workdir), args.deadline, server_log_excerpt, report, has_anomalies
    )


if __name__ == "__main__":
    sys.exit(main())
