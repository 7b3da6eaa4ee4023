"""What counting fair use costs a message and a new session, on SQLite and on PostgreSQL.

parley runs in this process (parley.testing's `parley_app`, the composition root of `parley
serve`) with the keyless demo model and an in-memory MCP client, the local user. With `--limits
on`, `limits:` sets all three per-principal limits high enough never to refuse
(`running_turns` 1000, `sessions_per_minute` and `messages_per_minute` 1,000,000), so every call
pays for being counted and none is refused; `--limits off` sets none (nothing is counted). After
a warm-up, one session takes `--messages` messages back to back (`send_message`, each waited for
until answered), then `--starts` new sessions are started, each with a message. Per call: wall
time (p50, p95, mean) and this process's CPU (parley, the client and the demo model; the
PostgreSQL server's own CPU is not included). Each database is a fresh one per run: a SQLite file
in a temporary folder, or a new PostgreSQL schema `parley_bench_<random>` (dropped at the end).

The script uses only parley.testing and MCP, so it measures any revision: put a checkout first on
PYTHONPATH to measure it (`PYTHONPATH=/path/to/checkout .venv/bin/python bench/fair_use_cost.py`);
the JSON's `parley_module` says which ran.

`--part store` (this revision and later) measures the store alone, without MCP, turns or the
model: one idle session of one principal is sent a message (`enqueue_message`, timed) and the
message is deleted again (so the session is idle for the next), `--messages` times each, in
turn: without a claim, with the fair-use claim (all three limits, never refusing), and as main
counted before this revision (a read of the principal's running sessions in a transaction of its
own, then the message; the per-minute counts were in memory); then
`--starts` sessions are created with their first message, alternating the same way. Each timed
call is one transaction; on a loaded machine the pairs see the same load. The principal's
admissions of the minute grow to `--messages` rows, what a principal at a limit that high keeps.

    .venv/bin/python bench/fair_use_cost.py --limits on
    .venv/bin/python bench/fair_use_cost.py --limits off --databases sqlite --messages 100
    .venv/bin/python bench/fair_use_cost.py --part store --messages 1000 --starts 500
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import anyio
import psycopg
from _common import latency_summary, loadavg_1m, machine
from mcp import Client

import parley
from parley.storage.sql.store import SqlStore
from parley.storage.sql.usage import RUNNING_OF_OWNER
from parley.testing import call, parley_app

ON = {"running_turns": 1000, "sessions_per_minute": 1_000_000, "messages_per_minute": 1_000_000}
WARM_UP = 20

# What main read before queueing a message: the owner's running sessions, on their own.
RUNNING_SESSIONS_OF = RUNNING_OF_OWNER


def _drop_schema(postgres: str, schema: str) -> None:
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def _timed(client: Client, n: int, tool: str, **arguments: Any) -> tuple[list[float], float]:
    """`n` calls of `tool`, each answered: their wall times in ms, and CPU ms per call."""
    walls: list[float] = []
    cpu = time.process_time()
    for _ in range(n):
        started = time.perf_counter()
        outcome = await call(client, tool, **arguments)
        walls.append((time.perf_counter() - started) * 1000)
        assert outcome["status"] == "answered", outcome
    return walls, (time.process_time() - cpu) * 1000 / n


async def run_once(database: str, limits: bool, messages: int, starts: int, postgres: str) -> dict[str, Any]:
    config: dict[str, Any] = {"limits": ON} if limits else {}
    schema = f"parley_bench_{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="parley-fair-use-") as folder:
        db: str | Path = Path(folder) / "parley.db"
        if database == "postgresql":
            config["storage"] = {"schema": schema}
            db = postgres
        try:
            async with parley_app(config, db=db, directory=Path(folder)) as app, app.mcp() as client:
                first = await call(client, "start_session", agent="demo", message="warm up")
                session = first["session_id"]
                await _timed(client, WARM_UP, "send_message", session_id=session, message="warm")
                sent, sent_cpu = await _timed(
                    client, messages, "send_message", session_id=session, message="hi"
                )
                started, start_cpu = await _timed(
                    client, starts, "start_session", agent="demo", message="hello"
                )
        finally:
            if database == "postgresql":
                _drop_schema(postgres, schema)
    return {
        "database": database,
        "message": {
            **latency_summary(sent),
            "mean_ms": round(statistics.mean(sent), 3),
            "cpu_ms": round(sent_cpu, 3),
        },
        "start": {
            **latency_summary(started),
            "mean_ms": round(statistics.mean(started), 3),
            "cpu_ms": round(start_cpu, 3),
        },
    }


async def store_once(database: str, messages: int, starts: int, postgres: str) -> dict[str, Any]:
    """The store alone: enqueue and create_session with and without a claim, alternating."""
    from parley.config import LimitsConfig
    from parley.core.changes import Admit
    from parley.core.ids import QueuedMessageId, SessionId, new_session_id
    from parley.core.records import QueuedMessageRecord, SessionRecord
    from parley.core.transitions import starting
    from parley.runtime.access import Principal
    from parley.runtime.fair_use import Claim, FairUse
    from parley.runtime.session_steps import SessionSteps
    from parley.storage.ports import Store
    from parley.storage.postgres import open_postgres_store
    from parley.storage.sqlite import open_sqlite_store

    fair = FairUse(LimitsConfig(**ON))
    who = Principal(id="alice", scopes=frozenset({"parley:use"}), authenticated=True)
    schema = f"parley_bench_{secrets.token_hex(4)}"
    times: dict[str, list[float]] = {
        k: [] for k in ("message_off", "message_on", "message_main", "start_off", "start_on")
    }

    def record() -> SessionRecord:
        return SessionRecord.new(new_session_id(), agent="demo", owner="alice", kind="chat", now=time.time())

    def message(sid: SessionId, now: float) -> QueuedMessageRecord:
        return QueuedMessageRecord.new(sid, "hi", now=now)

    def admit(claim: Claim | None) -> Admit | None:
        return (
            None if claim is None else Admit(claim.scope, lambda usage: claim.admit(usage, starts_turn=False))
        )

    async def measure(store: Store) -> None:
        steps = SessionSteps(store)
        session = record()
        await store.create_session(starting(session, None), None, time.time())
        for n in range(3 * messages):
            kind, now = ("message_off", "message_on", "message_main")[n % 3], time.time()
            claim = (
                fair.claim(who, new_session=False, message=True, now=now) if kind == "message_on" else None
            )
            queued = message(session.id, now)
            started = time.perf_counter()
            if kind == "message_main":  # what main did: the running sessions read first, on their own
                await cast(SqlStore, store)._count(RUNNING_SESSIONS_OF, ("alice",))
            outcome, _ = await steps.enqueue_message(
                session.id, "alice", queued, lambda _: 10**9, now, None, claim
            )
            times[kind].append((time.perf_counter() - started) * 1000)
            assert outcome == "queued", outcome
            await steps.delete_queued(session.id, "alice", QueuedMessageId(queued.id), time.time())
        for n in range(2 * starts):
            on, now = n % 2 == 1, time.time()
            fresh = record()
            first = message(fresh.id, now)
            claim = fair.claim(who, new_session=True, message=True, now=now) if on else None
            started = time.perf_counter()
            assert await store.create_session(starting(fresh, first), first, now, admit(claim))
            times["start_on" if on else "start_off"].append((time.perf_counter() - started) * 1000)

    with tempfile.TemporaryDirectory(prefix="parley-fair-use-") as folder:
        try:
            if database == "postgresql":
                async with open_postgres_store(postgres, schema=schema) as pg:
                    await measure(pg)
            else:
                async with open_sqlite_store(Path(folder) / "parley.db") as lite:
                    await measure(lite)
        finally:
            if database == "postgresql":
                _drop_schema(postgres, schema)
    return {
        "database": database,
        **{k: {**latency_summary(v), "mean_ms": round(statistics.mean(v), 3)} for k, v in times.items()},
    }


async def main(args: argparse.Namespace) -> None:
    load = loadavg_1m()
    runs = []
    for _ in range(args.repeat):
        for database in args.databases.split(","):
            if args.part == "store":
                runs.append(await store_once(database, args.messages, args.starts, args.postgres))
            else:
                runs.append(
                    await run_once(database, args.limits == "on", args.messages, args.starts, args.postgres)
                )
    print(
        json.dumps(
            {
                "part": args.part,
                "limits": args.limits,
                "runs": runs,
                "parley_module": str(Path(parley.__file__).parent),
                "loadavg_1m_before": load,
                "loadavg_1m_after": loadavg_1m(),
                **machine("sqlite"),
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part", choices=("mcp", "store"), default="mcp")
    parser.add_argument("--limits", choices=("on", "off"), default="on")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--starts", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--postgres", default="postgresql://root@127.0.0.1:5432/test")
    anyio.run(main, parser.parse_args())
