"""Where parley's time and writes go in a long session of text turns: py-spy, strace and an SQL
trace around N turns over stdio, with the fake model of bench/side_by_side.py.

Starts the fake OpenAI-compatible model (bench/fake_openai.py) and `parley serve` over stdio on a
fresh SQLite file in OUT (the `bench` agent of side_by_side.py: the fake model, streamed, and the
fixture tool server), warms up on a first session, then drives ONE new session for `--turns`
text turns (`--tool`: turns 2..N each call the fixture tool once) while any of these watch the
server:

- `--py-spy raw|speedscope`: `py-spy record --threads` on the server for the span of the turns
  (py-spy must be installed by hand: `.venv/bin/pip install py-spy`; it is not a dependency).
  With raw output the script prints the top functions by own and by inclusive samples, per
  thread;
- `--strace`: `strace -f -y` on the server (all its threads) for the span of the turns: syscalls
  per turn, fsyncs per turn by file, bytes written per turn by file, and the WAL frames per turn
  by the table or index that owns each page (the frame headers give the page numbers; `dbstat`
  of the final database says whose page each one is);
- `--sql-trace`: parley runs under bench/sqlite_trace.py, which writes every SQL statement to a
  file; the script counts statements per turn by kind and table, and per second while idle
  (`--idle-s` after the turns), so background work is visible apart.

After the server has exited the script reads the database: rows per table for the profiled
session (per turn), bytes per table and index (`dbstat`), and indexes per table. Everything is
kept in OUT. Prints readable lines and one final JSON line.

    .venv/bin/python bench/profile_turns.py --out /tmp/prof --py-spy raw
    .venv/bin/python bench/profile_turns.py --out /tmp/prof2 --strace --sql-trace

Profilers slow the server down (strace most): take latency from side_by_side.py, not from here.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import anyio
import yaml
from _common import REPO, connect_read_only, own_cpu_seconds, percentile
from anyio.abc import Process
from mcp import Client, StdioServerParameters
from side_by_side import (
    AGENT,
    BENCH,
    KEY,
    KEY_ENV,
    TOOL_MESSAGE,
    fake_model,
    read_pid,
    tree_cpu_seconds,
    turn,
    write_parley_config,
)

PY_SPY = Path(sys.executable).parent / "py-spy"
ATTACH_S = 1.5  # time for a profiler to attach before the turns start


def server_parameters(out: Path, config: Path, sql_trace: bool) -> StdioServerParameters:
    if sql_trace:
        command = [sys.executable, str(BENCH / "sqlite_trace.py"), str(out / "sql.trace")]
    else:
        command = [sys.executable, "-m", "parley"]
    command += ["serve", "--config", str(config)]
    pid_file, log = out / "server.pid", out / "server.log"
    script = f"echo $$ > {shlex.quote(str(pid_file))}; exec {shlex.join(command)} 2>> {shlex.quote(str(log))}"
    return StdioServerParameters(
        command="/bin/sh", args=["-c", script], env={"PYTHONUNBUFFERED": "1", KEY_ENV: KEY}, cwd=str(REPO)
    )


def line_count(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(1 for _ in f)


async def start_profilers(args: argparse.Namespace, out: Path, pid: int) -> list[tuple[str, Process]]:
    started: list[tuple[str, Process]] = []
    if args.py_spy != "off":
        suffix = "txt" if args.py_spy == "raw" else "json"
        command = [str(PY_SPY), "record", "--pid", str(pid), "--threads", "--full-filenames"]
        command += ["--rate", str(args.rate)] + (["--native"] if args.native else [])
        command += ["--gil"] if args.gil else []
        command += ["--format", args.py_spy, "--output", str(out / f"py-spy.{suffix}")]
        started.append(("py-spy", await open_logged(command, out / "py-spy.log")))
    if args.strace:
        command = [
            "strace",
            "-f",
            "-T",
            "-y",
            "-xx",
            "-s",
            "24",
            "-p",
            str(pid),
            "-o",
            str(out / "strace.txt"),
        ]
        started.append(("strace", await open_logged(command, out / "strace.log")))
    if started:
        await anyio.sleep(ATTACH_S)
    return started


async def open_logged(command: list[str], log: Path) -> Process:
    with log.open("ab") as sink:
        return await anyio.open_process(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)


async def stop_profilers(started: list[tuple[str, Process]]) -> None:
    """SIGINT makes py-spy write its file and strace detach; wait for both."""
    for _, process in started:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
    with anyio.CancelScope(shield=True):
        for name, process in started:
            with anyio.move_on_after(60):
                await process.wait()
            if process.returncode is None:
                print(f"{name} did not stop after SIGINT; killed", file=sys.stderr)
                process.kill()
                await process.wait()


def proc_io(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = int(value)
    return fields


async def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "turns": args.turns,
        "warmup": args.warmup,
        "tool_turns": args.tool,
        "new_sessions": args.new_sessions,
    }
    async with fake_model(out, 0.0) as (model_url, _):
        config = write_parley_config(out, model_url)
        if args.postgres:
            on_postgres(config, args.postgres)
        params = server_parameters(out, config, args.sql_trace)
        trace = out / "sql.trace"
        timeout = args.call_timeout
        async with Client(params) as client:
            pid = read_pid(out / "server.pid", b"parley")
            warm, _ = await turn(client, timeout, None, "warm up 1", "warm-up", AGENT)
            for k in range(2, args.warmup + 1):
                await turn(client, timeout, warm, f"warm up {k}", "warm-up", AGENT)
            profilers = await start_profilers(args, out, pid)
            marks = {"before": line_count(trace)}
            io0, cpu0, client0 = proc_io(pid), tree_cpu_seconds(pid), own_cpu_seconds()
            threads0, system0 = thread_cpu_seconds(pid), thread_cpu_seconds(pid, "system")
            t0 = time.perf_counter()
            latencies, session_id = [], None
            for k in range(1, args.turns + 1):
                message = TOOL_MESSAGE if args.tool and k > 1 else f"turn {k}"
                # --new-sessions: every turn is the first of a new session (start_session).
                into: str | None = None if args.new_sessions else session_id
                session_id, ms = await turn(client, timeout, into, message, f"turn {k}", AGENT)
                latencies.append(ms)
            wall_s = time.perf_counter() - t0
            io1, cpu1 = proc_io(pid), tree_cpu_seconds(pid)
            threads1, system1 = thread_cpu_seconds(pid), thread_cpu_seconds(pid, "system")
            figures["thread_system_cpu_ms_per_turn"] = {
                str(tid): round((system1[tid] - system0.get(tid, 0.0)) / args.turns * 1000, 2)
                for tid in system1
            }
            thread_cpu = {tid: threads1[tid] - threads0.get(tid, 0.0) for tid in threads1}
            figures["client_cpu_s"] = round(own_cpu_seconds() - client0, 3)
            marks["after"] = line_count(trace)
            await stop_profilers(profilers)
            t1 = time.perf_counter()
            await anyio.sleep(args.idle_s)
            marks["idle"] = line_count(trace)
            figures["idle_s"] = round(time.perf_counter() - t1, 3)
    figures.update(
        session_id=session_id,
        wall_s=round(wall_s, 3),
        p50_ms=round(percentile(latencies, 50), 2),
        first20_p50_ms=round(percentile(latencies[:20], 50), 2),
        last20_p50_ms=round(percentile(latencies[-20:], 50), 2),
        server_tree_cpu_ms_per_turn=round((cpu1 - cpu0) / args.turns * 1000, 2),
        server_cpu_ms_per_turn=round(sum(thread_cpu.values()) / args.turns * 1000, 2),
        thread_cpu_ms_per_turn={
            str(tid): round(s / args.turns * 1000, 2)
            for tid, s in sorted(thread_cpu.items(), key=lambda x: -x[1])
        },
        io_per_turn={k: round((io1[k] - io0[k]) / args.turns) for k in ("wchar", "syscw", "write_bytes")},
        profilers=[name for name in ("py-spy", "strace") if uses(args, name)],
    )
    db = out / "parley.db"
    if not args.postgres:
        figures["database"] = inspect_database(db, str(session_id), args.turns)
    if args.sql_trace:
        figures["sql"] = sql_figures(trace, marks, args.turns, figures["idle_s"])
    if args.strace:
        figures["strace"] = strace_figures(out / "strace.txt", db, args.turns)
    if args.py_spy == "raw":
        figures["py_spy"] = py_spy_figures(out / "py-spy.txt", args.top, thread_cpu, args.turns)
    return figures


def on_postgres(config: Path, url: str) -> None:
    """Point the server at a schema of its own on PostgreSQL (created by parley, left behind for a
    look afterwards: `DROP SCHEMA ... CASCADE` it by hand)."""
    settings = yaml.safe_load(config.read_text())
    schema = f"parley_profile_{secrets.token_hex(4)}"
    settings["storage"] = {"url": url, "schema": schema}
    config.write_text(yaml.safe_dump(settings))
    print(f"PostgreSQL schema {schema}", file=sys.stderr)


def uses(args: argparse.Namespace, name: str) -> bool:
    return args.py_spy != "off" if name == "py-spy" else bool(args.strace)


# ------------------------------------------------------------------------------------ SQL trace

TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE|JOIN)\s+"?([A-Za-z_][A-Za-z0-9_]*)', re.IGNORECASE)


def statement_key(statement: str) -> str:
    words = statement.split(None, 1)
    verb = words[0].upper() if words else "?"
    if verb in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA"):
        return verb if verb != "PRAGMA" else "PRAGMA " + statement.split()[1].split("=")[0].split("(")[0]
    tables = sorted({t for t in TABLE.findall(statement) if not t.lower().startswith("sqlite_")})
    return f"{verb} {','.join(tables) or '?'}"


def sql_figures(trace: Path, marks: dict[str, int], turns: int, idle_s: float) -> dict[str, Any]:
    lines = trace.read_text(errors="replace").splitlines()
    during = Counter(statement_key(s) for s in lines[marks["before"] : marks["after"]])
    idle = Counter(statement_key(s) for s in lines[marks["after"] : marks["idle"]])
    total = sum(during.values())
    return {
        "statements": total,
        "per_turn": round(total / turns, 2),
        "by_kind_per_turn": {k: round(v / turns, 2) for k, v in during.most_common()},
        "idle_per_s": round(sum(idle.values()) / idle_s, 2) if idle_s else None,
        "idle_by_kind": dict(idle.most_common()),
        "transactions_per_turn": round(during["BEGIN"] / turns, 2),
    }


# --------------------------------------------------------------------------------------- strace

STRACE_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+|\?)(?:.*<([0-9.]+)>)?")
FD_PATH = re.compile(r"^(\d+)<([^>]*)>")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
ESCAPES = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "\\": 92, '"': 34}


def c_string(text: str) -> bytes:
    """The bytes of a string as strace -x prints it (printable as is, the rest as \\xNN)."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            if text[i + 1] == "x":
                out.append(int(text[i + 2 : i + 4], 16))
                i += 4
                continue
            out.append(ESCAPES.get(text[i + 1], ord(text[i + 1])))
            i += 2
            continue
        out += text[i].encode()
        i += 1
    return bytes(out)


def strace_figures(path: Path, db: Path, turns: int) -> dict[str, Any]:
    """Unfinished/resumed pairs are not joined: a call interrupted by another thread's is counted
    from its first line (name, fd) and its time and result are lost; writes to the database files
    are never split so in practice (sqlite's worker thread makes them one at a time)."""
    calls: Counter[str] = Counter()
    fsyncs: Counter[str] = Counter()
    fsync_s: defaultdict[str, float] = defaultdict(float)
    written: Counter[str] = Counter()
    wal_pages: Counter[int] = Counter()
    threads: dict[str, Counter[str]] = defaultdict(Counter)
    for line in path.read_text(errors="replace").splitlines():
        unfinished = line.rstrip().endswith("<unfinished ...>")
        if unfinished:
            head = re.match(r"^(\d+)\s+(\w+)\(", line)
            if head:
                calls[head.group(2)] += 1
                threads[head.group(1)][head.group(2)] += 1
            continue
        match = STRACE_LINE.match(line)
        if not match:
            continue
        tid, name, arguments, result, seconds = match.groups()
        calls[name] += 1
        threads[tid][name] += 1
        fd = FD_PATH.match(arguments)
        where = label(c_string(fd.group(2)).decode(errors="replace"), db) if fd else ""
        if name in ("fsync", "fdatasync"):
            fsyncs[where] += 1
            fsync_s[where] += float(seconds or 0)
        if name in ("write", "pwrite64", "writev", "sendto", "sendmsg") and result.lstrip("-").isdigit():
            written[where or name] += max(0, int(result))
            if name == "pwrite64" and where == "wal" and int(result) == 24:
                data = STRING.search(arguments)
                if data:
                    wal_pages[int.from_bytes(c_string(data.group(1))[:4], "big")] += 1
    owners = page_owners(db)
    frames_by_owner: Counter[str] = Counter()
    for page, count in wal_pages.items():
        frames_by_owner[owners.get(page, "(page no longer in use)")] += count
    page_size = database_page_size(db)
    return {
        "syscalls_per_turn": round(sum(calls.values()) / turns, 1),
        "top_syscalls_per_turn": {k: round(v / turns, 2) for k, v in calls.most_common(15)},
        "by_thread_per_turn": {
            tid: {k: round(v / turns, 1) for k, v in counter.most_common(8)}
            for tid, counter in sorted(threads.items(), key=lambda item: -sum(item[1].values()))
        },
        "fsyncs_per_turn": {k: round(v / turns, 2) for k, v in fsyncs.most_common()},
        "fsync_ms_per_turn": {
            k: round(v * 1000 / turns, 2) for k, v in sorted(fsync_s.items(), key=lambda kv: -kv[1])
        },
        "bytes_written_per_turn": {k: round(v / turns) for k, v in written.most_common(12)},
        "wal_frames_per_turn": round(sum(wal_pages.values()) / turns, 2),
        "wal_frames_per_turn_by_owner": {k: round(v / turns, 2) for k, v in frames_by_owner.most_common()},
        "wal_bytes_per_turn_by_owner": {
            k: round(v * (page_size + 24) / turns) for k, v in frames_by_owner.most_common()
        },
    }


def label(path: str, db: Path) -> str:
    if path == str(db):
        return "db"
    if path == f"{db}-wal":
        return "wal"
    if path == f"{db}-shm":
        return "shm"
    if path.startswith(("pipe:", "socket:", "UNIX:", "TCP:", "TCPv6:")):
        return path.split("[")[0].split(":")[0]
    return Path(path).name or path


def page_owners(db: Path) -> dict[int, str]:
    try:
        with connect_read_only(db) as conn:
            return {int(p): str(n) for n, p in conn.execute("SELECT name, pageno FROM dbstat")}
    except sqlite3.Error:
        return {}


def database_page_size(db: Path) -> int:
    with connect_read_only(db) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


# ------------------------------------------------------------------------------------- database


def inspect_database(db: Path, session_id: str, turns: int) -> dict[str, Any]:
    conn = connect_read_only(db)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows: dict[str, Any] = {}
        for table in tables:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            total = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            entry: dict[str, Any] = {
                "rows": total,
                "indexes": len(conn.execute(f"PRAGMA index_list({table})").fetchall()),
            }
            if "session_id" in columns or table == "sessions":
                key = "id" if table == "sessions" else "session_id"
                size = " + ".join(f"COALESCE(LENGTH({c}), 0)" for c in columns)
                n, nbytes = conn.execute(
                    f"SELECT COUNT(*), SUM({size}) FROM {table} WHERE {key} = ?", (session_id,)
                ).fetchone()
                entry.update(
                    session_rows=n,
                    session_rows_per_turn=round(n / turns, 2),
                    session_value_bytes_per_turn=round((nbytes or 0) / turns),
                )
            rows[table] = entry
        events = {
            kind: {"per_turn": round(n / turns, 2), "avg_data_bytes": round(avg or 0)}
            for kind, n, avg in conn.execute(
                "SELECT kind, COUNT(*), AVG(LENGTH(data)) FROM events WHERE session_id = ? GROUP BY kind "
                "ORDER BY COUNT(*) DESC",
                (session_id,),
            )
        }
        try:
            stat: dict[str, Any] = {
                name: {"pages": pages, "bytes": size, "payload": payload}
                for name, pages, size, payload in conn.execute(
                    "SELECT name, COUNT(*), SUM(pgsize), SUM(payload) FROM dbstat GROUP BY name ORDER BY 3 DESC"
                )
            }
        except sqlite3.Error as exc:
            stat = {"error": str(exc)}
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        page_count = conn.execute("PRAGMA page_count").fetchone()[0]
    finally:
        conn.close()
    return {
        "file_bytes": db.stat().st_size,
        "page_size": page_size,
        "pages": page_count,
        "tables": rows,
        "events_by_kind": events,
        "dbstat": stat,
    }


# --------------------------------------------------------------------------------------- py-spy


FRAME = re.compile(r"^(.*) \((.*?):(\d+)\)$")
# Leaves where a thread waits, not computes. py-spy's own idle filter does not catch them here, so
# they are dropped by name (aiosqlite's worker waits for its next job at core.py line 59, `tx.get()`).
IDLE_LEAVES = (
    "EpollSelector.select",
    "Condition.wait",
    "ThreadedChildWatcher._do_waitpid",
    "Lock.acquire",
)
IDLE_LINES = ("aiosqlite/core.py:59",)


def short(path: str) -> str:
    """A frame's file, relative to site-packages, the repository or the standard library."""
    for marker in ("site-packages/", f"{REPO}/", "/lib/python3."):
        if marker in path:
            rest = path.split(marker, 1)[1]
            return rest.split("/", 1)[1] if marker == "/lib/python3." else rest
    return path


def py_spy_figures(path: Path, top: int, thread_cpu: dict[int, float], turns: int) -> dict[str, Any]:
    """Collapsed stacks (`thread;frame;... count`, root first, full file names), split by thread;
    idle leaves dropped. For the busy threads: own samples by line, inclusive samples by function
    (with the line of its `def`), as shares of that thread's busy samples and as ms per turn of
    the thread's CPU (from /proc)."""
    threads: dict[str, dict[str, Any]] = {}
    definitions = DefinitionLines()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        label, *names = stack.split(";")
        frames = [parse_frame(f) for f in names]
        entry = threads.setdefault(label, {"samples": 0, "busy": 0, "own": Counter(), "inclusive": Counter()})
        entry["samples"] += n
        if not frames:
            continue
        name, file, lineno = frames[-1]
        if name in IDLE_LEAVES or f"{short(file)}:{lineno}" in IDLE_LINES:
            continue
        entry["busy"] += n
        entry["own"][f"{name} ({short(file)}:{lineno})"] += n
        for fname, ffile in {(f[0], f[1]) for f in frames}:
            entry["inclusive"][f"{fname} ({short(ffile)}:{definitions.line(ffile, fname)})"] += n
    out: dict[str, Any] = {}
    for label, entry in sorted(threads.items(), key=lambda item: -item[1]["busy"]):
        tid = int(m.group(1)) if (m := re.match(r"thread \((\d+)\)", label)) else -1
        cpu_ms = thread_cpu.get(tid, 0.0) * 1000 / turns
        busy = entry["busy"]

        def shares(counter: Counter[str], busy: int = busy, cpu_ms: float = cpu_ms) -> list[list[Any]]:
            return [
                [k, round(100 * v / busy, 1), round(cpu_ms * v / busy, 2)]
                for k, v in counter.most_common(top)
                if v < busy * 0.995 or len(counter) == 1  # drop the frames every sample has (the roots)
            ]

        out[label] = {
            "samples": entry["samples"],
            "busy_samples": busy,
            "cpu_ms_per_turn": round(cpu_ms, 2),
            "own": shares(entry["own"]) if busy else [],
            "inclusive": shares(entry["inclusive"]) if busy else [],
        }
    return out


def parse_frame(frame: str) -> tuple[str, str, int]:
    match = FRAME.match(frame)
    return (match.group(1), match.group(2), int(match.group(3))) if match else (frame, "?", 0)


class DefinitionLines:
    """The line of a function's `def` from its qualified name (`Class.method`), read from the source."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, int]] = {}

    def line(self, file: str, qualname: str) -> int | str:
        if file not in self._files:
            self._files[file] = self._read(file)
        return self._files[file].get(qualname.replace(".<locals>", ""), "?")

    @staticmethod
    def _read(file: str) -> dict[str, int]:
        try:
            tree = ast.parse(Path(file).read_text())
        except (OSError, SyntaxError, ValueError):
            return {}
        found: dict[str, int] = {}

        def walk(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        found.setdefault(name, child.lineno)
                    walk(child, name + ".")
                else:
                    walk(child, prefix)

        walk(tree, "")
        return found


def thread_cpu_seconds(pid: int, field: str = "both") -> dict[int, float]:
    """utime+stime (or `field` "user" / "system" alone) of each thread of `pid`, from
    /proc/<pid>/task/<tid>/stat."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        user, system = int(fields[11]), int(fields[12])
        found[int(task.name)] = {"both": user + system, "user": user, "system": system}[field] / ticks
    return found


# ----------------------------------------------------------------------------------------- main


def report(r: dict[str, Any]) -> None:
    print(
        f"parley, {r['turns']} {'tool' if r['tool_turns'] else 'text'} turns in one session over stdio"
        f" (profilers: {', '.join(r['profilers']) or 'none'})"
    )
    print(
        f"  p50 {r['p50_ms']} ms (first 20 {r['first20_p50_ms']}, last 20 {r['last20_p50_ms']}),"
        f" server tree CPU {r['server_tree_cpu_ms_per_turn']} ms/turn, /proc io per turn {r['io_per_turn']}"
    )
    if "sql" in r:
        s = r["sql"]
        print(
            f"  SQL: {s['per_turn']} statements per turn, {s['transactions_per_turn']} transactions;"
            f" idle {s['idle_per_s']} statements/s"
        )
        for kind, n in s["by_kind_per_turn"].items():
            print(f"    {n:8.2f}  {kind}")
    if "strace" in r:
        t = r["strace"]
        print(f"  syscalls per turn {t['syscalls_per_turn']}: {t['top_syscalls_per_turn']}")
        for tid, counts in t["by_thread_per_turn"].items():
            print(f"    thread {tid}: {counts}")
        print(f"  fsyncs per turn {t['fsyncs_per_turn']}, their time per turn (ms) {t['fsync_ms_per_turn']}")
        print(f"  bytes written per turn {t['bytes_written_per_turn']}")
        print(
            f"  WAL frames per turn {t['wal_frames_per_turn']}, bytes by owner {t['wal_bytes_per_turn_by_owner']}"
        )
    if "database" in r:
        d = r["database"]
        print(f"  database {d['file_bytes']} bytes, {d['pages']} pages of {d['page_size']}")
        for table, entry in d["tables"].items():
            print(f"    {table}: {entry}")
        print(f"  events by kind (per turn, average data bytes): {d['events_by_kind']}")
        print(f"  dbstat: {d['dbstat']}")
    print(f"  CPU per turn by thread (ms): {r['thread_cpu_ms_per_turn']}")
    print(f"    of which in the kernel (system time): {r['thread_system_cpu_ms_per_turn']}")
    if "py_spy" in r:
        for label, t in r["py_spy"].items():
            print(
                f"  py-spy {label}: {t['samples']} samples, {t['busy_samples']} busy;"
                f" {t['cpu_ms_per_turn']} ms CPU per turn"
            )
            if not t["busy_samples"]:
                continue
            print("    own (% of busy samples, ms per turn):")
            for name, pct, ms in t["own"]:
                print(f"      {pct:5.1f} {ms:6.2f}  {name}")
            print("    inclusive:")
            for name, pct, ms in t["inclusive"]:
                print(f"      {pct:5.1f} {ms:6.2f}  {name}")
    print(json.dumps(r, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a new or empty folder for everything")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10, help="turns of a first session, not profiled")
    parser.add_argument("--py-spy", choices=["off", "raw", "speedscope"], default="off")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    parser.add_argument(
        "--gil", action="store_true", help="py-spy --gil: only samples of the thread holding the GIL"
    )
    parser.add_argument("--top", type=int, default=30, help="functions to list")
    parser.add_argument(
        "--tool", action="store_true", help="turns 2..N each call the fixture tool once (tool turns)"
    )
    parser.add_argument(
        "--new-sessions", action="store_true", help="every turn starts a new session (start_session)"
    )
    parser.add_argument("--strace", action="store_true")
    parser.add_argument("--sql-trace", action="store_true", help="SQLite only: every statement to a file")
    parser.add_argument("--postgres", help="run on this PostgreSQL database (a new schema) instead of SQLite")
    parser.add_argument("--idle-s", type=float, default=5.0, help="idle seconds after the turns (SQL trace)")
    parser.add_argument("--call-timeout", type=float, default=120.0)
    parser.add_argument("--deadline", type=float, default=1200.0)
    args = parser.parse_args()
    if not 20 <= args.turns <= 990:
        parser.error("--turns must be 20..990")
    if args.py_spy != "off" and not PY_SPY.exists():
        parser.error(
            f"{PY_SPY} is missing: .venv/bin/pip install py-spy (an analysis tool, not a dependency)"
        )
    if args.postgres and args.sql_trace:
        parser.error("--sql-trace traces SQLite; on PostgreSQL use store_cost.py's counts")
    if args.strace and shutil.which("strace") is None:
        parser.error("strace is not installed")
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty")

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(args.deadline):
            return await run(args, args.out.resolve())

    report(anyio.run(bounded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
