"""What the store costs a turn, on SQLite and on PostgreSQL, in one run: transactions, statements
and round trips per text turn and per one-tool turn, server CPU and p50 of a text turn, and
turns/s at 32 concurrent HTTP sessions.

For each database (`--databases sqlite,postgresql`) and each repeat (`--repeat`, the databases
alternating), parley is started twice as `parley serve --http` on 127.0.0.1 with the `bench` agent
of bench/side_by_side.py (the fake OpenAI-compatible model of bench/fake_openai.py, streamed, and
the tests' fixture tool server), on a fresh store each time: a new SQLite file, or on PostgreSQL a
new schema `parley_bench_<random>` (`storage.schema`, dropped at the end) in the database of
`--postgres`, so that no two runs ever meet (its user must be allowed to create schemas). Only
the CLI, `parley.yaml` and MCP are used, so the script measures any revision of parley: run it with
that checkout's Python (`/path/to/checkout/.venv/bin/python bench/store_cost.py`). The servers
start in folders of their own, so they import the parley installed in that venv, never a checkout
in the working directory; the JSON's `parley_module` and `parley_commit` say which ran.

1. **Counting run** (the store is watched; its timings are not used). After a warm-up session
   (text and tool turns, which also starts the tool server), one new session takes `--turns` text
   turns, another `--tool-turns` turns that each call the fixture tool once, then the server is
   left idle for `--idle-s`. Each window is counted on its own:
   - SQLite: parley runs with a trace callback on every `sqlite3` connection (this script started
     as `store_cost.py --trace-sqlite FILE serve ...`, the same patch as bench/sqlite_trace.py,
     with the connection's number on each line). Statements are the traced statements (BEGIN and
     COMMIT included); a transaction is a `BEGIN ...` (or a SAVEPOINT outside one), plus each
     statement run outside a transaction (autocommit; PRAGMAs not counted). No round trips: SQLite
     runs in parley's process.
   - PostgreSQL: parley connects through a small TCP proxy in this script that parses the wire
     protocol in both directions. Statements are the server's CommandComplete messages (BEGIN and
     COMMIT included; an ErrorResponse is counted apart). Transactions follow the status byte of
     ReadyForQuery on each connection: idle after "in transaction" (or "failed") is one BEGIN ...
     COMMIT/ROLLBACK; idle after idle with statements completed in between is one autocommit
     transaction (a pipeline of statements up to one Sync is one implicit transaction), which is
     what pg_stat_database's xact_commit + xact_rollback counts. A round trip is the client speaking
     again after the server has spoken: the number of times parley sent the database something
     after it had received something since its previous message (pipelined messages with no answer
     between them are one round trip; a Flush-and-wait inside a pipeline is one more). Connection
     start-up before the first ReadyForQuery is not counted (connections opened are, apart). As a
     cross-check the run also reads pg_stat_database's transactions of the whole database around
     the text window. That figure is higher by the transactions no statement causes: the
     listening backend runs about one for each notification it delivers (NotificationResponse, counted
     too), and it includes anything else that uses the same database meanwhile (other test runs:
     on a shared database only the proxy's figures hold). Around the text and the tool window it
     also reads WAL bytes (pg_current_wal_lsn), WAL records and flushes (pg_stat_wal), rows
     written and read (pg_stat_database) and, when the database has the pg_stat_statements
     extension, the statements the server ran (nested ones included), their rows, WAL, execution
     time and the heaviest of them. WAL is the whole server's: use a server nothing else uses.
2. **Timing run** (nothing watches the store; parley connects to the database directly). After the
   same warm-up, one new session takes `--turns` text turns back to back: p50/p95 of a turn as the
   client sees it, and the CPU per turn of parley's processes (utime+stime of the server and its
   children, from /proc) and, on PostgreSQL, of the database's backend processes that serve parley
   (found by matching pg_stat_activity.client_port to parley's TCP sockets). Then
   `--http-sessions` (32) clients, each with its own MCP `Client` and session (opened with a first
   message before the clock starts), all start together and send `--http-turns` turns each:
   turns/s is all those turns over the wall time to the last answer. `--tool-turns` one-tool turns
   are timed too (CPU only).

Every answer is checked. The fake model, the clients and the database share the machine's cores
with parley: on a small machine turns/s is bounded by all of them. Prints a table (SQLite,
PostgreSQL, PostgreSQL / SQLite), then one JSON line with every figure (with `--repeat`, each is the
median of the runs).

    .venv/bin/python bench/store_cost.py                   # both databases, once (~3 min on 2 cores)
    .venv/bin/python bench/store_cost.py --repeat 3        # medians of three runs
    .venv/bin/python bench/store_cost.py --quick           # a small run (~1 min)
    .venv/bin/python bench/store_cost.py --databases postgresql --turns 100 \\
        --postgres postgresql://root@127.0.0.1:5432/test

The script talks only to 127.0.0.1, the PostgreSQL server of `--postgres` and the processes it
starts; it stops by itself and is bounded by --deadline (the whole run) and --call-timeout (each
tool call).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.to_thread
import psycopg
from _common import (
    HOST,
    add_limit_options,
    cpu_seconds,
    latency_summary,
    loadavg_1m,
    log_excerpt,
    parley_module,
    require_linux,
    run_and_report,
    run_figures,
    stop_process,
    wait_for_url,
    write_config_files,
)
from anyio.abc import Process, SocketAttribute, SocketStream
from mcp import Client
from psycopg import sql
from side_by_side import (
    KEY,
    KEY_ENV,
    TOOL_MESSAGE,
    bench_agent,
    fake_model,
    median_of,
    process_tree,
    reap,
    tree_cpu_seconds,
    turn,
)

DEFAULT_POSTGRES = os.environ.get("PARLEY_TEST_POSTGRES", "postgresql://root@127.0.0.1:5432/test")
DATABASES = ("sqlite", "postgresql")
TRACE_FLAG = "--trace-sqlite"
MAX_TURNS = 1000  # the agent's limits.max_turns per session
WARMUP_TEXT_TURNS = 3
STATS_SETTLE_S = 1.5  # PostgreSQL backends report their statistics within about a second of idling

# ------------------------------------------------------------------------- SQLite: the trace


def traced_parley(trace_file: Path, argv: list[str]) -> int:
    """parley's CLI with a trace callback on every sqlite3 connection: each statement SQLite runs
    is appended to `trace_file` as one line, "<connection number> <statement>" (newlines folded)."""
    trace = trace_file.open("a", encoding="utf-8", buffering=1)  # open for the process's life
    lock = threading.Lock()
    numbers = itertools.count(1)
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection: sqlite3.Connection = connect(*args, **kwargs)
        number = next(numbers)

        def write(statement: str) -> None:
            line = f"{number} {' '.join(statement.split())}\n"
            with lock:
                trace.write(line)

        connection.set_trace_callback(write)
        return connection

    sqlite3.connect = traced  # type: ignore[assignment]
    from parley.cli import main as parley_main  # after the patch: the store looks it up at call time

    return int(parley_main(argv))


def trace_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(1 for _ in f)


def sqlite_counts(trace: Path, marks: Sequence[int]) -> list[dict[str, Any]]:
    """Statements and transactions in each window [marks[i], marks[i+1]) of the trace's lines.
    Each connection's transaction state is followed from the start of the trace."""
    lines = trace.read_text(errors="replace").splitlines()
    windows: list[dict[str, Any]] = [
        {"statements": 0, "explicit": 0, "autocommit": 0, "pragmas": 0, "kinds": Counter()} for _ in marks[1:]
    ]
    in_tx: dict[str, bool] = {}
    savepoints: dict[str, int] = {}
    for index, line in enumerate(lines[: marks[-1]]):
        connection, _, statement = line.partition(" ")
        words = statement.split()
        verb = words[0].upper() if words else "?"
        second = words[1].upper() if len(words) > 1 else ""
        window = next((w for i, w in enumerate(windows) if marks[i] <= index < marks[i + 1]), None)
        inside = in_tx.get(connection, False)
        started = False
        if verb == "BEGIN":
            in_tx[connection], started = True, not inside
        elif verb in ("COMMIT", "END") or (verb == "ROLLBACK" and second != "TO"):
            in_tx[connection] = False
            savepoints[connection] = 0
        elif verb == "SAVEPOINT":
            if not inside:
                in_tx[connection], started = True, True
                savepoints[connection] = 1
            elif savepoints.get(connection, 0):
                savepoints[connection] += 1
        elif verb == "RELEASE" and savepoints.get(connection, 0):
            savepoints[connection] -= 1
            if savepoints[connection] == 0:
                in_tx[connection] = False
        if window is None:
            continue
        window["statements"] += 1
        window["kinds"][verb if verb != "BEGIN" else " ".join(words[:2]).upper()] += 1
        if started:
            window["explicit"] += 1
        elif verb == "PRAGMA":
            window["pragmas"] += 1
        elif not inside and verb not in ("COMMIT", "END", "ROLLBACK", "RELEASE"):
            window["autocommit"] += 1
    return windows


# ------------------------------------------------------------------ PostgreSQL: the wire proxy

SSL_REQUEST, GSSENC_REQUEST, CANCEL_REQUEST = 80877103, 80877104, 80877102


class WireCounts:
    """What went over the wire between parley and PostgreSQL, summed over every connection."""

    def __init__(self) -> None:
        self.totals: Counter[str] = Counter()
        self.tags: Counter[str] = Counter()
        self.client_messages: Counter[str] = Counter()

    def snapshot(self) -> dict[str, int]:
        return {
            **self.totals,
            **{f"tag {k}": v for k, v in self.tags.items()},
            **{f"sent {k}": v for k, v in self.client_messages.items()},
        }


class WireConnection:
    """One proxied connection: the protocol parsed in both directions, counted into `counts`."""

    def __init__(self, counts: WireCounts) -> None:
        self.counts = counts
        self.from_client_buffer = bytearray()
        self.from_server_buffer = bytearray()
        self.client_untyped = True  # SSLRequest / GSSENCRequest / StartupMessage have no type byte
        self.server_single_bytes = 0  # answers to SSLRequest / GSSENCRequest: one byte each
        self.opaque = False  # encrypted: nothing more can be read
        self.ready = False  # the first ReadyForQuery has come: start-up is over
        self.server_spoke = False
        self.status = "I"
        self.completed_since_ready = 0

    def from_client(self, data: bytes) -> None:
        if self.opaque:
            return
        buffer = self.from_client_buffer
        buffer += data
        while True:
            if self.client_untyped:
                if len(buffer) < 8 or len(buffer) < int.from_bytes(buffer[0:4], "big"):
                    return
                length, code = int.from_bytes(buffer[0:4], "big"), int.from_bytes(buffer[4:8], "big")
                del buffer[:length]
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    self.server_single_bytes += 1
                elif code != CANCEL_REQUEST:
                    self.client_untyped = False  # the StartupMessage
                continue
            if len(buffer) < 5 or len(buffer) < 1 + int.from_bytes(buffer[1:5], "big"):
                return
            kind, length = chr(buffer[0]), int.from_bytes(buffer[1:5], "big")
            del buffer[: 1 + length]
            if not self.ready or kind == "X":  # start-up (authentication) or Terminate
                continue
            self.counts.client_messages[kind] += 1
            if self.server_spoke:
                self.counts.totals["round_trips"] += 1
                self.server_spoke = False

    def from_server(self, data: bytes) -> None:
        if self.opaque:
            return
        buffer = self.from_server_buffer
        buffer += data
        while True:
            if self.server_single_bytes:
                if not buffer:
                    return
                answer = chr(buffer[0])
                del buffer[:1]
                self.server_single_bytes -= 1
                if answer != "N":  # TLS or GSS encryption accepted: the rest cannot be parsed
                    self.opaque = True
                    self.counts.totals["opaque_connections"] += 1
                    return
                continue
            if len(buffer) < 5 or len(buffer) < 1 + int.from_bytes(buffer[1:5], "big"):
                return
            kind, length = chr(buffer[0]), int.from_bytes(buffer[1:5], "big")
            payload = bytes(buffer[5 : 1 + length])
            del buffer[: 1 + length]
            self.server_message(kind, payload)

    def server_message(self, kind: str, payload: bytes) -> None:
        totals = self.counts.totals
        if kind == "Z":
            status = chr(payload[0]) if payload else "I"
            if not self.ready:
                self.ready = True
                totals["connections_ready"] += 1
            elif status == "I" and self.status in ("T", "E"):
                totals["explicit_transactions"] += 1
            elif status == "I" and self.status == "I" and self.completed_since_ready:
                totals["autocommit_transactions"] += 1
            self.status = status
            self.completed_since_ready = 0
        if not self.ready:
            return
        self.server_spoke = True
        if kind == "C":
            tag = payload.split(b"\0", 1)[0].decode(errors="replace").split()
            self.counts.tags[tag[0] if tag else "?"] += 1
            totals["statements"] += 1
            self.completed_since_ready += 1
        elif kind == "E":
            totals["errors"] += 1
            self.completed_since_ready += 1
        elif kind == "A":
            totals["notifications"] += 1


@asynccontextmanager
async def wire_proxy(upstream_host: str, upstream_port: int) -> AsyncIterator[tuple[int, WireCounts]]:
    """A TCP proxy on 127.0.0.1 (a free port) to the PostgreSQL server, counting what it carries:
    (its port, the counts). Connections still open when the block ends are cut."""
    counts = WireCounts()

    async def pump(source: SocketStream, sink: SocketStream, parse: Callable[[bytes], None]) -> None:
        try:
            async for chunk in source:
                parse(chunk)
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await sink.send_eof()

    async def handle(client: SocketStream) -> None:
        async with client:
            try:
                upstream = await anyio.connect_tcp(upstream_host, upstream_port)
            except OSError:
                return
            async with upstream:
                connection = WireConnection(counts)
                counts.totals["connections_opened"] += 1
                async with anyio.create_task_group() as tg:
                    tg.start_soon(pump, client, upstream, connection.from_client)
                    tg.start_soon(pump, upstream, client, connection.from_server)

    listener = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
    port = int(listener.extra(SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield port, counts
        finally:
            tg.cancel_scope.cancel()


def wire_window(before: dict[str, int], after: dict[str, int], turns: int) -> dict[str, Any]:
    d = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}
    explicit, autocommit = d.get("explicit_transactions", 0), d.get("autocommit_transactions", 0)
    return {
        "turns": turns,
        "transactions_per_turn": round((explicit + autocommit) / turns, 2),
        "explicit_per_turn": round(explicit / turns, 2),
        "autocommit_per_turn": round(autocommit / turns, 2),
        "statements_per_turn": round(d.get("statements", 0) / turns, 2),
        "round_trips_per_turn": round(d.get("round_trips", 0) / turns, 2),
        "notifications_per_turn": round(d.get("notifications", 0) / turns, 2),
        "errors": d.get("errors", 0),
        "connections_opened": d.get("connections_opened", 0),
        "by_kind_per_turn": {
            k.removeprefix("tag "): round(v / turns, 2) for k, v in sorted(d.items()) if k.startswith("tag ")
        },
        "messages_sent_per_turn": {
            k.removeprefix("sent "): round(v / turns, 2)
            for k, v in sorted(d.items())
            if k.startswith("sent ")
        },
    }


def sqlite_window(window: dict[str, Any], turns: int) -> dict[str, Any]:
    explicit, autocommit = window["explicit"], window["autocommit"]
    kinds: Counter[str] = window["kinds"]
    return {
        "turns": turns,
        "transactions_per_turn": round((explicit + autocommit) / turns, 2),
        "explicit_per_turn": round(explicit / turns, 2),
        "autocommit_per_turn": round(autocommit / turns, 2),
        "statements_per_turn": round(window["statements"] / turns, 2),
        "pragmas_per_turn": round(window["pragmas"] / turns, 2),
        "by_kind_per_turn": {k: round(v / turns, 2) for k, v in kinds.most_common()},
    }


def idle_rates(window: dict[str, Any], seconds: float) -> dict[str, Any]:
    """An idle window's figures (counted as one "turn") per second of `seconds`."""
    return {
        "idle_s": round(seconds, 2),
        "transactions_per_s": round(window["transactions_per_turn"] / seconds, 2),
        "statements_per_s": round(window["statements_per_turn"] / seconds, 2),
    }


# ---------------------------------------------------------------------------- PostgreSQL: admin


def with_port(url: str, port: int) -> str:
    """`url` with the host 127.0.0.1 and `port` (the proxy) instead of its own."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}{HOST}:{port}"))


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or HOST, parts.port or 5432


def new_schema() -> str:
    return f"parley_bench_{secrets.token_hex(4)}"


def drop_schemas(url: str, schemas: Iterable[str]) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        for schema in schemas:
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def database_xacts(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


# One query, so that the filter on "pg_stat_statements" keeps the reading out of what it reads.
DB_WORK_QUERY = """
SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal,
       (SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database
         WHERE datname = current_database()) AS written,
       (SELECT tup_returned FROM pg_stat_database WHERE datname = current_database()) AS returned,
       (SELECT tup_fetched FROM pg_stat_database WHERE datname = current_database()) AS fetched,
       to_regclass('pg_stat_statements') IS NOT NULL AS has_pss,
       (SELECT wal_records FROM pg_stat_wal) AS records,
       (SELECT wal_sync FROM pg_stat_wal) AS syncs
"""
PSS_QUERY = """
SELECT queryid, left(regexp_replace(query, '\\s+', ' ', 'g'), 90), calls, rows, wal_bytes,
       total_exec_time, shared_blks_hit + shared_blks_read
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query NOT ILIKE '%%pg_stat_statements%%' AND query NOT ILIKE '%%pg_stat_database%%'
"""
TOP_STATEMENTS = 10


def db_work(url: str) -> dict[str, Any]:
    """The server's WAL position, records and flushes (pg_stat_wal), the database's tuple counters (pg_stat_database: they lag
    until the backends report, so read after STATS_SETTLE_S), and pg_stat_statements' figures per
    statement when the extension is installed in the database. WAL is the whole server's: only a
    server that nothing else uses (a private one) gives parley's WAL alone."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(DB_WORK_QUERY).fetchone()
        assert row is not None
        found: dict[str, Any] = {"wal": int(row[0]), "written": int(row[1] or 0)}
        found.update(returned=int(row[2] or 0), fetched=int(row[3] or 0), statements=None)
        found.update(records=int(row[5] or 0), syncs=int(row[6] or 0))
        if row[4]:
            found["statements"] = {
                int(r[0]): (str(r[1]), int(r[2]), int(r[3]), int(r[4]), float(r[5]), int(r[6]))
                for r in conn.execute(PSS_QUERY).fetchall()
            }
    return found


def db_work_window(before: dict[str, Any], after: dict[str, Any], turns: int) -> dict[str, Any]:
    """Per turn: WAL bytes and rows written (pg_stat_database), and from pg_stat_statements the
    statements the server executed, the rows they returned or touched, their WAL, execution time,
    buffers, and the heaviest of them."""
    out: dict[str, Any] = {
        "wal_bytes_per_turn": round((after["wal"] - before["wal"]) / turns),
        "rows_written_per_turn": round((after["written"] - before["written"]) / turns, 2),
        "tuples_returned_per_turn": round((after["returned"] - before["returned"]) / turns, 1),
        "tuples_fetched_per_turn": round((after["fetched"] - before["fetched"]) / turns, 1),
        "wal_records_per_turn": round((after["records"] - before["records"]) / turns, 1),
        "wal_syncs_per_turn": round((after["syncs"] - before["syncs"]) / turns, 2),
    }
    if after["statements"] is None or before["statements"] is None:
        return out
    deltas: list[tuple[str, int, int, int, float, int]] = []
    for queryid, (text, *figures) in after["statements"].items():
        base = before["statements"].get(queryid, (text, 0, 0, 0, 0.0, 0))[1:]
        d = [a - b for a, b in zip(figures, base, strict=True)]
        if d[0]:
            deltas.append((text, int(d[0]), int(d[1]), int(d[2]), float(d[3]), int(d[4])))
    out["pss_statements_per_turn"] = round(sum(d[1] for d in deltas) / turns, 2)
    out["pss_rows_per_turn"] = round(sum(d[2] for d in deltas) / turns, 2)
    out["pss_wal_bytes_per_turn"] = round(sum(d[3] for d in deltas) / turns)
    out["pss_exec_ms_per_turn"] = round(sum(d[4] for d in deltas) / turns, 3)
    out["pss_buffers_per_turn"] = round(sum(d[5] for d in deltas) / turns, 1)
    out["pss_top"] = [
        {
            "query": d[0],
            "calls": round(d[1] / turns, 2),
            "rows": round(d[2] / turns, 2),
            "wal_bytes": round(d[3] / turns),
            "exec_ms": round(d[4] / turns, 4),
        }
        for d in sorted(deltas, key=lambda d: -d[4])[:TOP_STATEMENTS]
    ]
    return out


def local_ports_to(pids: Iterable[int], remote_port: int) -> set[int]:
    """The local ports of the TCP connections to `remote_port` that the processes `pids` hold,
    from their /proc/<pid>/fd links (socket inodes) and /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def backend_cpu(url: str, server_pid: int) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend that serves a connection of parley's process
    tree (pg_stat_activity.client_port among the tree's local ports to the database)."""
    ports = local_ports_to(process_tree(server_pid), host_port(url)[1])
    if not ports:
        return {}
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s) AND pid <> pg_backend_pid()",
            (sorted(ports),),
        ).fetchall()
    found: dict[int, float] = {}
    for (pid,) in rows:
        with contextlib.suppress(OSError):
            found[int(pid)] = cpu_seconds(int(pid))
    return found


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two `backend_cpu` readings (a backend that appeared counts whole)."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


# ---------------------------------------------------------------------------------- the server


def write_config(directory: Path, model_url: str, storage: dict[str, Any]) -> Path:
    """`storage` as given, default runtime settings, the fixture tool server (read_thing: a read,
    no approval) and the `bench` agent of side_by_side.py on the fake model."""
    fixture, agent = bench_agent(directory, model_url)
    config = {"storage": storage, "runtime": {}, "mcp_servers": {"fixture": fixture}}
    return write_config_files(directory, config, [agent])


@asynccontextmanager
async def parley_http(
    directory: Path, config: Path, trace: Path | None
) -> AsyncIterator[tuple[Process, str]]:
    """`parley serve --http` on 127.0.0.1 (a free port), started in `directory` (so the installed
    parley is imported, never a checkout in the working directory), under the SQLite trace when
    `trace` is given; its URL. Killed if still running when the block ends."""
    serve = ["serve", "--config", str(config), "--http", "--host", HOST, "--port", "0", "--log-level", "INFO"]
    command = [sys.executable, *([__file__, TRACE_FLAG, str(trace)] if trace else ["-m", "parley"]), *serve]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", KEY_ENV: KEY}
    for name in ("PARLEY_DB", "PARLEY_CONFIG"):
        env.pop(name, None)
    log = directory / "server.log"
    with log.open("ab") as sink:
        process = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, cwd=directory, env=env
        )
    try:
        yield process, await wait_for_url(process, log)
    finally:
        if process.returncode is None:
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.wait()


async def stop(process: Process) -> dict[str, Any]:
    """SIGTERM, then reap the fixture servers it started; how it went."""
    pids = process_tree(process.pid)
    exit_code, stop_s, killed = await stop_process(process)
    leftovers = await reap(pids)
    return {
        "exit_code": exit_code,
        "stop_s": round(stop_s, 3),
        "killed": killed,
        "killed_leftovers": leftovers,
    }


async def warm_up(client: Client, timeout_s: float) -> None:
    """A first session: text turns, then a tool turn (which starts the tool server)."""
    session_id, _ = await turn(client, timeout_s, None, "warm up 1", "warm-up")
    for k in range(2, WARMUP_TEXT_TURNS + 1):
        await turn(client, timeout_s, session_id, f"warm up {k}", "warm-up")
    await turn(client, timeout_s, session_id, TOOL_MESSAGE, "warm-up tool turn")


async def text_turns(client: Client, timeout_s: float, turns: int, label: str) -> tuple[list[float], float]:
    """A new session (its first message untimed, before this returns control), then `turns` text
    turns back to back: (latencies in ms, wall seconds of the turns)."""
    session_id, _ = await turn(client, timeout_s, None, f"{label} opens", label)
    return await more_turns(client, timeout_s, session_id, turns, label, tool=False)


async def more_turns(
    client: Client, timeout_s: float, session_id: str, turns: int, label: str, tool: bool
) -> tuple[list[float], float]:
    latencies: list[float] = []
    t0 = time.perf_counter()
    for k in range(1, turns + 1):
        message = TOOL_MESSAGE if tool else f"{label} {k}"
        _, ms = await turn(client, timeout_s, session_id, message, f"{label} {k}")
        latencies.append(ms)
    return latencies, time.perf_counter() - t0


# ------------------------------------------------------------------------------- counting run


async def count_run(
    database: str, workdir: Path, model_url: str, args: argparse.Namespace, schemas: list[str]
) -> dict[str, Any]:
    await anyio.Path(workdir).mkdir(parents=True)
    timeout = args.call_timeout
    trace = workdir / "sql.trace"
    async with contextlib.AsyncExitStack() as stack:
        counts: WireCounts | None = None
        xacts0 = xacts1 = 0
        work0 = work1 = work3 = {}
        if database == "sqlite":
            config = write_config(workdir, model_url, {"path": "parley.db"})
            served = parley_http(workdir, config, trace)
        else:
            port, counts = await stack.enter_async_context(wire_proxy(*host_port(args.postgres)))
            schemas.append(new_schema())
            storage = {"url": with_port(args.postgres, port), "schema": schemas[-1]}
            config = write_config(workdir, model_url, storage)
            served = parley_http(workdir, config, None)
        process, url = await stack.enter_async_context(served)

        def mark() -> Any:
            return counts.snapshot() if counts is not None else trace_lines(trace)

        async with Client(url) as client:
            await warm_up(client, timeout)
            session_id, _ = await turn(client, timeout, None, "counted opens", "counted text")
            tool_session, _ = await turn(client, timeout, None, "tools open", "counted tools")
            if counts is not None:
                await anyio.sleep(STATS_SETTLE_S)
                xacts0, work0 = database_xacts(args.postgres), db_work(args.postgres)
            m0 = mark()
            await more_turns(client, timeout, session_id, args.turns, "counted text", tool=False)
            m1 = mark()
            if counts is not None:
                await anyio.sleep(STATS_SETTLE_S)
                xacts1, work1 = database_xacts(args.postgres), db_work(args.postgres)
            m2 = mark()
            await more_turns(client, timeout, tool_session, args.tool_turns, "counted tool", tool=True)
            m3 = idle_from = mark()
            if counts is not None:
                await anyio.sleep(STATS_SETTLE_S)
                work3 = db_work(args.postgres)
                idle_from = mark()  # the idle window starts after the settle and the reading
            t_idle = time.perf_counter()
            await anyio.sleep(args.idle_s)
            m4 = mark()
            idle_s = time.perf_counter() - t_idle
        stopped = await stop(process)
    if counts is None:
        windows = sqlite_counts(trace, [m0, m1, m2, m3, m4])
        text, _, tool, idle = (
            sqlite_window(w, n) for w, n in zip(windows, (args.turns, 1, args.tool_turns, 1), strict=True)
        )
        if not text["statements_per_turn"]:
            raise RuntimeError(
                "the SQLite trace holds no statement of the text turns: is the store on sqlite3?"
            )
        extra: dict[str, Any] = {}
    else:
        text = wire_window(m0, m1, args.turns) | db_work_window(work0, work1, args.turns)
        tool = wire_window(m2, m3, args.tool_turns) | db_work_window(work1, work3, args.tool_turns)
        idle = wire_window(idle_from, m4, 1)
        if m4.get("opaque_connections"):
            raise RuntimeError("the connections to PostgreSQL are encrypted: the proxy cannot count them")
        if not text["statements_per_turn"]:
            raise RuntimeError("no statement went through the proxy during the text turns")
        extra = {"pg_stat_database_xacts_per_text_turn": round((xacts1 - xacts0) / args.turns, 2)}
    return {"text": text, "tool": tool, "idle": idle_rates(idle, idle_s), **extra, **stopped}


# --------------------------------------------------------------------------------- timing run


async def timing_run(
    database: str, workdir: Path, model_url: str, args: argparse.Namespace, schemas: list[str]
) -> dict[str, Any]:
    await anyio.Path(workdir).mkdir(parents=True)
    timeout = args.call_timeout
    if database == "sqlite":
        storage: dict[str, Any] = {"path": "parley.db"}
    else:
        schemas.append(new_schema())
        storage = {"url": args.postgres, "schema": schemas[-1]}
    config = write_config(workdir, model_url, storage)

    def db_cpu(pid: int) -> dict[int, float]:
        return backend_cpu(args.postgres, pid) if database == "postgresql" else {}

    async with parley_http(workdir, config, None) as (process, url):
        pid = process.pid
        async with Client(url) as client:
            await warm_up(client, timeout)
            session_id, _ = await turn(client, timeout, None, "timed opens", "timed text")
            cpu0, db0 = tree_cpu_seconds(pid), db_cpu(pid)
            latencies, wall_s = await more_turns(
                client, timeout, session_id, args.turns, "timed text", tool=False
            )
            cpu1, db1 = tree_cpu_seconds(pid), db_cpu(pid)
            tool_session, _ = await turn(client, timeout, None, "timed tools open", "timed tools")
            cpu2, db2 = tree_cpu_seconds(pid), db_cpu(pid)
            await more_turns(client, timeout, tool_session, args.tool_turns, "timed tool", tool=True)
            cpu3, db3 = tree_cpu_seconds(pid), db_cpu(pid)
        tool = {
            "turns": args.tool_turns,
            "parley_cpu_ms_per_turn": round((cpu3 - cpu2) / args.tool_turns * 1000, 2),
        }
        if database == "postgresql":
            tool["database_cpu_ms_per_turn"] = round(cpu_delta(db2, db3) / args.tool_turns * 1000, 2)
        text = {
            "turns": args.turns,
            **latency_summary(latencies),
            "wall_s": round(wall_s, 3),
            "parley_cpu_ms_per_turn": round((cpu1 - cpu0) / args.turns * 1000, 2),
        }
        if database == "postgresql":
            text["database_cpu_ms_per_turn"] = round(cpu_delta(db0, db1) / args.turns * 1000, 2)
        concurrent = await concurrent_turns(url, pid, args, db_cpu)
        stopped = await stop(process)
    return {"text": text, "tool": tool, "concurrent": concurrent, **stopped}


async def concurrent_turns(
    url: str, pid: int, args: argparse.Namespace, db_cpu: Callable[[int], dict[int, float]]
) -> dict[str, Any]:
    """`--http-sessions` clients connect and open a session each (its first message), then all
    start together and send `--http-turns` text turns each, back to back."""
    level, turns, timeout = args.http_sessions, args.http_turns, args.call_timeout
    latencies: list[float] = []
    ready, go, finished = anyio.Event(), anyio.Event(), anyio.Event()
    counts = {"ready": 0, "finished": 0}
    marks: dict[str, float] = {}

    async def caller(index: int) -> None:
        async with Client(url) as client:
            label = f"caller {index} of {level}"
            session_id, _ = await turn(client, timeout, None, f"{label} opens", label)
            counts["ready"] += 1
            if counts["ready"] == level:
                ready.set()
            await go.wait()
            for k in range(1, turns + 1):
                _, ms = await turn(client, timeout, session_id, f"{label}, turn {k}", f"{label}, turn {k}")
                latencies.append(ms)
            counts["finished"] += 1
            if counts["finished"] == level:
                marks["end"] = time.perf_counter()
                finished.set()

    async with anyio.create_task_group() as tg:
        for index in range(level):
            tg.start_soon(caller, index)
        await ready.wait()
        cpu0, db0 = tree_cpu_seconds(pid), db_cpu(pid)
        start = time.perf_counter()
        go.set()
        await finished.wait()
        wall_s = marks["end"] - start
        cpu1, db1 = tree_cpu_seconds(pid), db_cpu(pid)
    total = level * turns
    figures = {
        "sessions": level,
        "turns": total,
        "wall_s": round(wall_s, 3),
        "turns_per_s": round(total / wall_s, 1),
        **latency_summary(latencies),
        "parley_cpu_ms_per_turn": round((cpu1 - cpu0) / total * 1000, 2),
    }
    if db0 or db1:
        figures["database_cpu_ms_per_turn"] = round(cpu_delta(db0, db1) / total * 1000, 2)
    return figures


# ------------------------------------------------------------------------------------- the run


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_before = loadavg_1m()
    started = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.databases}
    schemas: list[str] = []
    try:
        async with fake_model(workdir, 0.0) as (model_url, _):
            for repeat in range(1, args.repeat + 1):
                for database in args.databases:
                    folder = workdir / f"{database}-{repeat}"
                    print(f"  ... {database}: counting ({repeat}/{args.repeat})", file=sys.stderr, flush=True)
                    counted = await count_run(database, folder / "count", model_url, args, schemas)
                    print(f"  ... {database}: timing ({repeat}/{args.repeat})", file=sys.stderr, flush=True)
                    timed = await timing_run(database, folder / "time", model_url, args, schemas)
                    runs[database].append({"count": counted, "time": timed})
    finally:
        if schemas:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(drop_schemas, args.postgres, schemas)
    module = parley_module(workdir)
    return {
        "options": {
            "turns": args.turns,
            "tool_turns": args.tool_turns,
            "http_sessions": args.http_sessions,
            "http_turns": args.http_turns,
            "idle_s": args.idle_s,
            "repeat": args.repeat,
            "databases": args.databases,
            "postgres": args.postgres if "postgresql" in args.databases else None,
        },
        # With --repeat, each figure is the median of the runs.
        "databases": {name: median_of(results) for name, results in runs.items()},
        "runs": runs,
        "parley_module": module,
        "parley_commit": git_describe(Path(module).parent),
        "postgres_version": postgres_version(args.postgres) if "postgresql" in args.databases else None,
        **run_figures(started, load_before, "sqlite", "mcp"),
    }


def git_describe(folder: Path) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=folder, capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    return "unknown"


def postgres_version(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def run_logs(workdir: Path) -> str:
    parts = [log_excerpt(workdir / "fake_openai.log", "fake model log")]
    for log in sorted(workdir.glob("*/*/server.log")):
        parts.append(log_excerpt(log, f"{log.parent.parent.name}/{log.parent.name} server log"))
    return "\n".join(parts)


# ------------------------------------------------------------------------------------- report

Getter = Callable[[dict[str, Any]], float | None]


def get(*keys: str) -> Getter:
    def read(result: dict[str, Any]) -> float | None:
        value: Any = result
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value if isinstance(value, int | float) else None

    return read


def both(first: Getter, second: Getter) -> Getter:
    def read(result: dict[str, Any]) -> float | None:
        a, b = first(result), second(result)
        return round((a or 0) + (b or 0), 2) if a is not None else None

    return read


def rows(args: argparse.Namespace) -> list[tuple[str, Getter]]:
    n = args.http_sessions
    return [
        ("transactions per text turn (all)", get("count", "text", "transactions_per_turn")),
        ("  of them BEGIN ... COMMIT", get("count", "text", "explicit_per_turn")),
        ("transactions per one-tool turn (all)", get("count", "tool", "transactions_per_turn")),
        ("  of them BEGIN ... COMMIT", get("count", "tool", "explicit_per_turn")),
        ("statements per text turn", get("count", "text", "statements_per_turn")),
        ("statements per one-tool turn", get("count", "tool", "statements_per_turn")),
        ("round trips per text turn", get("count", "text", "round_trips_per_turn")),
        ("round trips per one-tool turn", get("count", "tool", "round_trips_per_turn")),
        ("idle: transactions per second", get("count", "idle", "transactions_per_s")),
        ("parley CPU per text turn (ms)", get("time", "text", "parley_cpu_ms_per_turn")),
        ("database CPU per text turn (ms)", get("time", "text", "database_cpu_ms_per_turn")),
        (
            "parley + database CPU per text turn (ms)",
            both(
                get("time", "text", "parley_cpu_ms_per_turn"), get("time", "text", "database_cpu_ms_per_turn")
            ),
        ),
        ("parley CPU per one-tool turn (ms)", get("time", "tool", "parley_cpu_ms_per_turn")),
        ("database CPU per one-tool turn (ms)", get("time", "tool", "database_cpu_ms_per_turn")),
        ("PG WAL bytes per text turn", get("count", "text", "wal_bytes_per_turn")),
        ("PG WAL bytes per one-tool turn", get("count", "tool", "wal_bytes_per_turn")),
        ("PG WAL flushes (fsync) per text turn", get("count", "text", "wal_syncs_per_turn")),
        ("PG WAL flushes (fsync) per one-tool turn", get("count", "tool", "wal_syncs_per_turn")),
        ("PG rows written per text turn", get("count", "text", "rows_written_per_turn")),
        ("PG rows written per one-tool turn", get("count", "tool", "rows_written_per_turn")),
        (
            "PG tuples returned+fetched, text turn",
            both(
                get("count", "text", "tuples_returned_per_turn"),
                get("count", "text", "tuples_fetched_per_turn"),
            ),
        ),
        ("pg_stat_statements: statements, text turn", get("count", "text", "pss_statements_per_turn")),
        ("pg_stat_statements: statements, tool turn", get("count", "tool", "pss_statements_per_turn")),
        ("pg_stat_statements: rows, text turn", get("count", "text", "pss_rows_per_turn")),
        ("pg_stat_statements: rows, tool turn", get("count", "tool", "pss_rows_per_turn")),
        ("pg_stat_statements: exec ms, text turn", get("count", "text", "pss_exec_ms_per_turn")),
        ("pg_stat_statements: exec ms, tool turn", get("count", "tool", "pss_exec_ms_per_turn")),
        ("text turn p50 (ms)", get("time", "text", "p50_ms")),
        ("text turn p95 (ms)", get("time", "text", "p95_ms")),
        (f"turns/s, {n} HTTP sessions", get("time", "concurrent", "turns_per_s")),
        (f"turn p50 at {n} sessions (ms)", get("time", "concurrent", "p50_ms")),
        (
            f"parley + database CPU per turn at {n} (ms)",
            both(
                get("time", "concurrent", "parley_cpu_ms_per_turn"),
                get("time", "concurrent", "database_cpu_ms_per_turn"),
            ),
        ),
    ]


def spread(read: Getter, runs: list[dict[str, Any]]) -> str:
    """Each run's figure, in run order (e.g. "13.1 / 13.2 / 13.1")."""
    values = [read(run) for run in runs]
    return "" if any(v is None for v in values) else " / ".join(f"{v:g}" for v in values)


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    o = r["options"]
    print(
        f"store cost: {o['turns']} text + {o['tool_turns']} tool turns counted and {o['turns']} text turns"
        f" timed per database, {o['http_sessions']} HTTP sessions x {o['http_turns']} turns;"
        f" parley {r['parley_commit']} ({r['parley_module']})"
        + (f"; medians of {o['repeat']} runs" if o["repeat"] > 1 else "")
    )
    sqlite_r, pg_r = r["databases"].get("sqlite", {}), r["databases"].get("postgresql", {})
    ranges = o["repeat"] > 1
    header = f"  {'figure':<44} {'SQLite':>9} {'PostgreSQL':>11} {'PG/SQLite':>10}"
    header += f"  {'SQLite runs':>22}  {'PostgreSQL runs':>22}" if ranges else ""
    print(header)
    print("  " + "-" * (len(header) - 2))
    for label, read in rows(args):
        s, p = read(sqlite_r), read(pg_r)
        ratio = f"{p / s:.2f}" if s and p is not None else ""
        line = f"  {label:<44} {'' if s is None else f'{s:g}':>9} {'' if p is None else f'{p:g}':>11} {ratio:>10}"
        if ranges:
            line += "".join(f"  {spread(read, r['runs'].get(name, [])):>22}" for name in DATABASES)
        print(line)
    if pg_r:
        print(
            f"  PostgreSQL cross-check: pg_stat_database counted"
            f" {pg_r['count'].get('pg_stat_database_xacts_per_text_turn')} transactions per text turn"
            f" (the whole database {urlsplit(o['postgres']).path.lstrip('/')}, anything else using it included);"
            f" the listener delivered {pg_r['count']['text'].get('notifications_per_turn')} notifications a turn"
        )
    print(
        f"  load average {r['loadavg_1m_before']} -> {r['loadavg_1m_after']}, nproc {r['nproc']}, Python"
        f" {r['python']}, SQLite {r['sqlite']}, PostgreSQL {r['postgres_version']}, mcp {r['mcp']},"
        f" total {r['total_wall_s']} s"
    )
    print(json.dumps(r, sort_keys=True, default=str))


# --------------------------------------------------------------------------------------- main


def parse_databases(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or set(names) - set(DATABASES):
        raise argparse.ArgumentTypeError("databases: sqlite, postgresql or both (sqlite,postgresql)")
    return names


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == TRACE_FLAG:
        return traced_parley(Path(sys.argv[2]), sys.argv[3:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a small run: 40 text, 10 tool, 32 x 3 HTTP turns"
    )
    parser.add_argument("--turns", type=int, default=None, help="text turns counted, and timed (200)")
    parser.add_argument("--tool-turns", type=int, default=None, help="one-tool turns counted (50)")
    parser.add_argument("--http-sessions", type=int, default=32, help="concurrent HTTP sessions (32)")
    parser.add_argument("--http-turns", type=int, default=None, help="turns per HTTP session (10)")
    parser.add_argument("--idle-s", type=float, default=None, help="idle seconds counted after the turns (5)")
    parser.add_argument(
        "--databases", type=parse_databases, default=list(DATABASES), help="sqlite,postgresql"
    )
    parser.add_argument(
        "--postgres", default=DEFAULT_POSTGRES, help=f"PostgreSQL server and database ({DEFAULT_POSTGRES})"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per database, alternating; medians reported"
    )
    add_limit_options(parser, 3600.0)
    args = parser.parse_args()
    quick = args.quick
    args.turns = args.turns or (40 if quick else 200)
    args.tool_turns = args.tool_turns or (10 if quick else 50)
    args.http_turns = args.http_turns or (3 if quick else 10)
    args.idle_s = args.idle_s if args.idle_s is not None else (2.0 if quick else 5.0)
    if not 1 <= args.turns <= MAX_TURNS - 1 or not 1 <= args.tool_turns <= MAX_TURNS - 1:
        parser.error(f"--turns and --tool-turns must be 1..{MAX_TURNS - 1}")
    if not 1 <= args.http_turns <= MAX_TURNS - 1 or not 1 <= args.http_sessions <= 256:
        parser.error(f"--http-turns must be 1..{MAX_TURNS - 1}, --http-sessions 1..256")
    if not 1 <= args.repeat <= 9 or args.idle_s <= 0:
        parser.error("--repeat must be 1..9 and --idle-s above 0")
    require_linux(parser, "stat")
    if "postgresql" in args.databases:
        try:
            postgres_version(args.postgres)
        except psycopg.Error as exc:
            parser.error(f"cannot reach PostgreSQL at {args.postgres}: {exc}")

    return run_and_report(
        lambda workdir: run(args, workdir), args.deadline, run_logs, lambda result: report(result, args)
    )


if __name__ == "__main__":
    sys.exit(main())
