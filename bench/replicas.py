"""Several parley replicas on PostgreSQL against one on SQLite: throughput, wake-up latency, and
the database's load at rest.

Three parts (`--parts`, default all):

- `throughput`: C concurrent HTTP callers (default levels 32 and 128), each with its own mcp SDK
  `Client` and session, send plain-text turns back to back to the demo agent (`--turns` each,
  every answer checked) against: one `parley serve --http` on SQLite, and N on PostgreSQL for each
  N of `--replicas` (default 1 and 3; caller i talks to replica i mod N). Reports turns/s,
  client-side p50/p95, the replicas' CPU per turn and, on PostgreSQL, committed transactions per
  turn (pg_stat_database) and the CPU of the database's server processes that served the benchmark's database.
- `wakeup`: two replicas on PostgreSQL; replica A may drive one session only and drives a turn
  that sleeps, so a message sent through A must be taken by replica B. For `--samples` messages
  (one new session each, sent one after another) it reports the time from the message being
  stored (queued_messages.created_at, A's clock) to its turn starting (turns.started_at, B's
  clock; one machine, one clock), with LISTEN/NOTIFY and with polling alone (storage.listen:
  false), at the default runtime.poll_interval_s (0.5 s).
- `rest`: `--parked` sessions parked in the database (half waiting for a person, half on a durable
  timer an hour away), then one and then three replicas left alone for `--rest-seconds`: the
  transactions per second they cause (pg_stat_database xact_commit + xact_rollback of the
  benchmark's own database, so nothing else on the server counts), the index and sequential
  scans of `sessions`, and the replicas' CPU; with LISTEN/NOTIFY on, and with it off.

Every run works in a database of its own (`parley_bench_<random>`, created on the server
`--postgres` names and dropped at the end) and a temporary folder.

    .venv/bin/python bench/replicas.py [--parts throughput,wakeup,rest] [--levels 32,128] [--turns 10]
        [--samples 30] [--parked 10000] [--rest-seconds 30] [--postgres postgresql://root@127.0.0.1:5432/test]

Prints readable lines, then one final JSON line with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg
from _common import (
    add_limit_options,
    call,
    cpu_seconds,
    latency_summary,
    loadavg_1m,
    log_excerpt,
    own_cpu_seconds,
    parse_level_list,
    require_linux,
    run_and_report,
    run_figures,
    start_http_server,
    stop_server,
    wait_for_url,
    write_config_files,
)
from anyio.abc import Process
from mcp import Client
from psycopg import sql

DEFAULT_POSTGRES = os.environ.get("PARLEY_TEST_POSTGRES", "postgresql://root@127.0.0.1:5432/test")
PARTS = ("throughput", "wakeup", "rest")


# ------------------------------------------------------------------------------------ the database


def _with_database(url: str, name: str) -> str:
    """`url` (postgresql://...) naming the database `name` instead."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@asynccontextmanager
async def bench_database(url: str) -> AsyncIterator[str]:
    """A database of the benchmark's own on the server of `url` (dropped at the end): its URL."""
    name = f"parley_bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_database(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def db_counters(url: str) -> dict[str, float]:
    """Transactions of this database so far, scans of its sessions table, and the CPU seconds of
    the server processes connected to it now, by pid (pg_stat_* are updated as backends report,
    within about a second)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        xacts = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        scans = conn.execute(
            "SELECT coalesce(sum(seq_scan), 0), coalesce(sum(idx_scan), 0) FROM pg_stat_user_tables "
            "WHERE relname = 'sessions'"
        ).fetchone()
        pids = [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
    figures: dict[str, float] = {
        "xacts": float(xacts[0]) if xacts else 0.0,
        "seq_scans": float(scans[0]) if scans else 0.0,
        "idx_scans": float(scans[1]) if scans else 0.0,
    }
    for pid in pids:
        with contextlib.suppress(OSError):  # gone meanwhile
            figures[f"pid:{pid}"] = cpu_seconds(pid)
    return figures


def db_cpu_s(before: dict[str, float], after: dict[str, float]) -> float:
    """CPU seconds the database's server processes spent between two `db_counters` (a process
    that appeared meanwhile counts whole)."""
    return sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith("pid:"))


async def settled_counters(url: str) -> dict[str, float]:
    """`db_counters` once the statistics of what just happened have been reported."""
    await anyio.sleep(1.2)
    return db_counters(url)


# ------------------------------------------------------------------------------------ the replicas


def config_for(directory: Path, db_url: str | None, **runtime: Any) -> Path:
    """parley.yaml: SQLite next to it (`db_url` None) or PostgreSQL; default settings unless given."""
    directory.mkdir(parents=True, exist_ok=True)
    storage: dict[str, Any] = {"path": "parley.db"} if db_url is None else {"url": db_url}
    listen = runtime.pop("listen", None)
    if listen is not None:
        storage["listen"] = listen
    return write_config_files(directory, {"storage": storage, "runtime": runtime})


@asynccontextmanager
async def replicas(
    directory: Path, config: Path, count: int, tag: str = "server"
) -> AsyncIterator[list[tuple[Process, str]]]:
    """`count` `parley serve --http` processes on `config`, each with its own log
    (`<tag><n>.log`): (process, url)."""
    async with AsyncExitStack() as stack:
        started: list[tuple[Process, str]] = []
        for index in range(count):
            log = directory / f"{tag}{index}.log"
            process = await start_http_server(directory, config, log)
            stack.push_async_callback(_stop, process)
            started.append((process, await wait_for_url(process, log)))
        yield started


async def _stop(process: Process) -> None:
    if process.returncode is None:
        with anyio.CancelScope(shield=True):
            await stop_server(process)


# ------------------------------------------------------------------------------------ throughput


async def level_run(
    urls: list[str], pids: list[int], db_url: str | None, level: int, turns: int, timeout_s: float
) -> dict[str, Any]:
    latencies: list[float] = []
    ready, go, done = anyio.Event(), anyio.Event(), anyio.Event()
    counts = {"ready": 0, "done": 0}

    async def caller(index: int) -> None:
        async with Client(urls[index % len(urls)]) as client:
            session = (await call(client, timeout_s, "start_session", agent="demo"))["session_id"]
            counts["ready"] += 1
            if counts["ready"] == level:
                ready.set()
            await go.wait()
            for turn in range(1, turns + 1):
                text = f"caller {index}, turn {turn}"
                t0 = time.perf_counter()
                outcome = await call(client, timeout_s, "send_message", session_id=session, message=text)
                latencies.append((time.perf_counter() - t0) * 1000)
                expected = f"You said: {text} (message {turn} of this session)"
                if outcome.get("answer") != expected:
                    raise RuntimeError(f"caller {index} turn {turn}: {outcome!r}")
            counts["done"] += 1
            if counts["done"] == level:
                done.set()

    async with anyio.create_task_group() as tg:
        for index in range(level):
            tg.start_soon(caller, index)
        await ready.wait()
        db_before = db_counters(db_url) if db_url else {}
        cpu_before = sum(cpu_seconds(pid) for pid in pids)
        client_before = own_cpu_seconds()
        start = time.perf_counter()
        go.set()
        await done.wait()
        wall = time.perf_counter() - start
        cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
        client_cpu = own_cpu_seconds() - client_before
    total = level * turns
    figures: dict[str, Any] = {
        "level": level,
        "turns": total,
        "wall_s": round(wall, 3),
        "turns_per_s": round(total / wall, 1),
        **latency_summary(latencies),
        "parley_cpu_ms_per_turn": round(cpu / total * 1000, 2),
        "parley_cpu_share": round(cpu / wall, 2),
        "client_cpu_share": round(client_cpu / wall, 2),
    }
    if db_url:
        db_after = await settled_counters(db_url)
        figures["db_xacts_per_turn"] = round((db_after["xacts"] - db_before["xacts"]) / total, 1)
        figures["db_cpu_ms_per_turn"] = round(db_cpu_s(db_before, db_after) / total * 1000, 2)
    return figures


async def throughput(
    workdir: Path, postgres: str, levels: list[int], turns: int, timeout_s: float, counts: list[int]
) -> list[Any]:
    results = []
    setups = [("sqlite x1", "sqlite", 1)] + [(f"postgres x{n}", "pg", n) for n in counts]
    for name, backend, count in setups:
        async with AsyncExitStack() as stack:
            db_url = await stack.enter_async_context(bench_database(postgres)) if backend == "pg" else None
            directory = workdir / name.replace(" ", "")
            config = config_for(directory, db_url)
            started = await stack.enter_async_context(replicas(directory, config, count))
            urls, pids = [u for _, u in started], [p.pid for p, _ in started]
            for level in levels:
                figures = await level_run(urls, pids, db_url, level, turns, timeout_s)
                results.append({"setup": name, **figures})
                print(f"  {name:12} {_level_line(figures)}", flush=True)
    return results


def _level_line(f: dict[str, Any]) -> str:
    db = (
        f"  db {f['db_xacts_per_turn']} xacts/turn, {f['db_cpu_ms_per_turn']} ms CPU/turn"
        if "db_xacts_per_turn" in f
        else ""
    )
    return (
        f"{f['level']:>4} sessions: {f['turns_per_s']:6.1f} turns/s  p50 {f['p50_ms']:8.1f} ms  "
        f"p95 {f['p95_ms']:8.1f} ms  parley {f['parley_cpu_ms_per_turn']} ms CPU/turn "
        f"({f['parley_cpu_share']} cores){db}  clients {f['client_cpu_share']} cores"
    )


# ------------------------------------------------------------------------------------ wake-ups


async def wakeup(workdir: Path, postgres: str, samples: int, timeout_s: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for mode, listen in (("notify", True), ("polling", False)):
        async with bench_database(postgres) as db_url:
            directory = workdir / f"wakeup-{mode}"
            busy = config_for(directory, db_url, listen=listen, max_driven_sessions=1)
            other = write_config_files(
                directory, {"storage": {"url": db_url, "listen": listen}, "runtime": {}}, name="other.yaml"
            )
            async with (
                replicas(directory, busy, 1, "a") as [(_, url_a)],
                replicas(directory, other, 1, "b"),
                Client(url_a) as client,
            ):
                # A drives this turn for the whole run: it can take nothing else.
                await call(
                    client,
                    timeout_s,
                    "start_session",
                    agent="demo",
                    message="/sleep 3600\nbusy",
                    wait_seconds=0,
                )
                await _until_driving(db_url)
                delays = []
                for n in range(samples):
                    sent = await call(client, timeout_s, "start_session", agent="demo", message=f"wake {n}")
                    if sent.get("status") != "answered":
                        raise RuntimeError(f"sample {n}: {sent!r}")
                    delays.append(_start_delay_ms(db_url, sent["session_id"]))
            results[mode] = {
                "samples": samples,
                **latency_summary(delays),
                "mean_ms": round(sum(delays) / len(delays), 2),
            }
            r = results[mode]
            print(
                f"  {mode:8} message stored on A -> turn started on B: p50 {r['p50_ms']} ms  p95 {r['p95_ms']} ms"
                f"  max {r['max_ms']} ms  mean {r['mean_ms']} ms ({samples} samples)",
                flush=True,
            )
    return results


async def _until_driving(db_url: str) -> None:
    with anyio.fail_after(60):
        while True:
            with psycopg.connect(db_url) as conn:
                if conn.execute("SELECT count(*) FROM sessions WHERE phase = 'model'").fetchone() == (1,):
                    return
            await anyio.sleep(0.05)


def _start_delay_ms(db_url: str, session_id: str) -> float:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT t.started_at - q.created_at FROM turns t JOIN queued_messages q ON q.id = t.queued_message_id "
            "WHERE t.session_id = %s",
            (session_id,),
        ).fetchone()
    if row is None:
        raise RuntimeError(f"no turn for session {session_id}")
    return float(row[0]) * 1000


# ------------------------------------------------------------------------------------ at rest


def park(db_url: str, count: int) -> None:
    """`count` sessions in a freshly migrated database: half wait for a person, half for a
    durable timer an hour away (rows as parley writes them; no turn needs to run)."""
    now = time.time()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sessions (id, agent, owner, kind, status, phase, created_at, updated_at, wake_at) "
            "SELECT 'ses_' || lpad(to_hex(n), 32, '0'), 'demo', 'local', 'chat', "
            "CASE WHEN n %% 2 = 0 THEN 'waiting_for_input' ELSE 'running' END, "
            "CASE WHEN n %% 2 = 0 THEN NULL ELSE 'waiting' END, %(now)s, %(now)s, "
            "CASE WHEN n %% 2 = 0 THEN NULL ELSE %(later)s END FROM generate_series(1, %(count)s) n",
            {"now": now, "later": now + 3600, "count": count},
        )
        conn.execute("ANALYZE sessions")


async def rest(workdir: Path, postgres: str, parked: int, seconds: float) -> list[Any]:
    results = []
    for listen in (True, False):
        async with bench_database(postgres) as db_url:
            directory = workdir / f"rest-{'notify' if listen else 'polling'}"
            config = config_for(directory, db_url, listen=listen)
            async with replicas(directory, config, 1):
                pass  # migrates the schema
            park(db_url, parked)
            # 0 replicas: what the benchmark's own reads of the statistics cost (subtract it).
            for count in (0, 1, 3):
                async with replicas(directory, config, count) as started:
                    await anyio.sleep(3)  # start-up done (the first scan, the pools)
                    pids = [p.pid for p, _ in started]
                    before, cpu_before = await settled_counters(db_url), sum(cpu_seconds(p) for p in pids)
                    await anyio.sleep(seconds)
                    cpu = sum(cpu_seconds(p) for p in pids) - cpu_before
                    after = await settled_counters(db_url)
                # The 1.2 s of settling is part of the window the counters cover.
                span = seconds + 1.2
                figures = {
                    "listen": listen,
                    "replicas": count,
                    "parked_sessions": parked,
                    "seconds": seconds,
                    "xacts_per_s": round((after["xacts"] - before["xacts"]) / span, 2),
                    "sessions_idx_scans_per_s": round((after["idx_scans"] - before["idx_scans"]) / span, 2),
                    "sessions_seq_scans": int(after["seq_scans"] - before["seq_scans"]),
                    "parley_cpu_share": round(cpu / seconds, 4),
                    "db_cpu_share": round(db_cpu_s(before, after) / span, 4),
                }
                results.append(figures)
                print(
                    f"  at rest, {parked} parked, {count} replica(s), listen {listen}: "
                    f"{figures['xacts_per_s']} transactions/s, {figures['sessions_idx_scans_per_s']} index scans "
                    f"of sessions/s, {figures['sessions_seq_scans']} sequential scans; parley "
                    f"{figures['parley_cpu_share']} cores, database {figures['db_cpu_share']} cores",
                    flush=True,
                )
    return results


# ------------------------------------------------------------------------------------ main


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_before = loadavg_1m()
    started = time.perf_counter()
    result: dict[str, Any] = {}
    if "throughput" in args.parts:
        print("throughput (plain-text turns over HTTP, every answer checked):", flush=True)
        result["throughput"] = await throughput(
            workdir, args.postgres, args.levels, args.turns, args.call_timeout, args.replicas
        )
    if "wakeup" in args.parts:
        print("wake-up latency (two replicas on PostgreSQL, default poll_interval_s 0.5):", flush=True)
        result["wakeup"] = await wakeup(workdir, args.postgres, args.samples, args.call_timeout)
    if "rest" in args.parts:
        print("at rest (pg_stat_database of the benchmark's own database):", flush=True)
        result["rest"] = await rest(workdir, args.postgres, args.parked, args.rest_seconds)
    return {**result, **run_figures(started, load_before, "mcp")}


def report(result: dict[str, Any]) -> None:
    print(f"load average before {result['loadavg_1m_before']}, after {result['loadavg_1m_after']}")
    print(json.dumps(result, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"any of {','.join(PARTS)}")
    parser.add_argument("--levels", type=lambda t: parse_level_list(t, 256, "32,128"), default=[32, 128])
    parser.add_argument(
        "--replicas",
        type=lambda t: parse_level_list(t, 8, "1,3"),
        default=[1, 3],
        help="replica counts on PostgreSQL in the throughput part (1,3)",
    )
    parser.add_argument("--turns", type=int, default=10, help="turns per session in the throughput part")
    parser.add_argument("--samples", type=int, default=30, help="messages measured in the wake-up part")
    parser.add_argument("--parked", type=int, default=10_000, help="parked sessions in the at-rest part")
    parser.add_argument("--rest-seconds", type=float, default=30.0, help="length of each at-rest window")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="a PostgreSQL server (superuser)")
    add_limit_options(parser, 1800.0)
    args = parser.parse_args()
    args.parts = [p for p in args.parts.split(",") if p]
    if not set(args.parts) <= set(PARTS):
        parser.error(f"--parts takes {','.join(PARTS)}")
    require_linux(parser, "stat")
    return run_and_report(lambda workdir: run(args, workdir), args.deadline, replica_logs, report)


def replica_logs(workdir: Path) -> str:
    """The excerpts of every replica's log of the run."""
    return "\n".join(
        log_excerpt(log, str(log.relative_to(workdir))) for log in sorted(workdir.rglob("*.log"))
    )


if __name__ == "__main__":
    sys.exit(main())
