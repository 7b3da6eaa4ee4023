"""The session event stream (GET /v1/sessions/{id}/events): how many events per second one stream
delivers, what an open stream costs in memory, and how long a committed event takes to reach a
stream on the same process and on another process sharing the SQLite file.

Starts `parley serve --http` (and for the last figure a second one on the same database) as
subprocesses in a temporary directory, with default settings except `http.stream_heartbeat_s`.

- throughput: one session is given `--events` events (rows written straight into the database, as
  a long history would be), then one client reads the stream from the start to the last event;
  events/s = events / time from the request to the last event read (replay: store page reads,
  JSON rendering, SSE writing and the client's parsing, all on this machine);
- memory: the server's resident memory (VmRSS) before and after `--streams` idle streams are
  opened (each on its own connection), divided by the number of streams;
- latency: a stream is open on process A; a message is sent `--turns` times through A, then
  through B; for each event of each turn, the time from its commit (the event's own timestamp,
  written in the transaction, same machine clock) to the moment the client read it. Through B
  the event reaches A's stream by the storage's wake-up between processes (SQLite: the FIFOs of
  the file's wake folder; PostgreSQL: LISTEN/NOTIFY), or else by A's EventWatch (one query per
  runtime.poll_interval_s, 0.5 s by default, for every followed session). Beside it, the CPU
  (utime + stime) each server spent per turn over the turns sent through B, and each
  send_message's time through B. `--peers N` starts N more servers on the database before B,
  which follow nothing (they hear every wake-up, and could claim B's sessions).

    .venv/bin/python bench/event_stream.py [--events 20000] [--streams 200] [--turns 20]
    .venv/bin/python bench/event_stream.py --latency-only [--postgres URL] [--turns 20]

`--latency-only` skips throughput and memory; `--postgres URL` (latency only) runs both servers
on a fresh schema of that database, dropped at the end.

Prints readable lines, then one JSON line. Loopback only; stops its servers.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import tempfile
import time
from contextlib import AsyncExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psycopg
from _common import (
    base_config,
    cpu_seconds,
    http_server,
    latency_summary,
    machine,
    memory_kib,
    wait_for_url,
    write_config_files,
)
from mcp import Client
from psycopg import sql


async def _read_until(
    http: httpx2.AsyncClient, url: str, last: int, headers: dict[str, str] | None = None
) -> int:
    """Read the stream until event `last` arrives; the number of events read."""
    count = 0
    async with http.stream("GET", url, headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                count += 1
                if int(line[4:]) >= last:
                    return count
    raise RuntimeError("the stream ended early")


def _add_events(db: Path, session_id: str, n: int) -> int:
    connection = sqlite3.connect(db, timeout=30)
    with connection:
        (latest,) = connection.execute(
            "SELECT event_seq FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        now = time.time()
        rows = [
            (session_id, latest + i, None, "text_delta", json.dumps({"text": f"piece {i} " * 8}), now)
            for i in range(1, n + 1)
        ]
        connection.executemany(
            "INSERT INTO events (session_id, seq, turn_id, kind, data, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        connection.execute("UPDATE sessions SET event_seq = ? WHERE id = ?", (latest + n, session_id))
    connection.close()
    return int(latest + n)


async def _latencies(
    db: str, base: str, session_id: str, sender: Client, turns: int, calls: list[float] | None = None
) -> list[float]:
    """Send `turns` messages through `sender` while a stream of `base` follows the session; the
    delay of every event from its commit to its arrival, in ms (and each send_message's own time,
    from request to answer, into `calls`)."""
    delays: list[float] = []
    async with httpx2.AsyncClient(timeout=60) as http:
        latest = 0
        async with anyio.create_task_group() as tg:
            done = anyio.Event()

            async def follow() -> None:
                nonlocal latest
                async with http.stream(
                    "GET", f"{base}/v1/sessions/{session_id}/events", headers={"Last-Event-ID": str(start)}
                ) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            data = json.loads(line[6:])
                            if "at" in data and data.get("seq"):
                                arrived = time.time()
                                committed = _parse_iso(data["at"])
                                delays.append((arrived - committed) * 1000)
                                if data["kind"] == "turn_ended":
                                    latest += 1
                                    if latest == turns:
                                        done.set()
                                        return

            start = _latest_seq(db, session_id)
            tg.start_soon(follow)
            await anyio.sleep(0.3)  # the stream is open before the first message
            for n in range(turns):
                sent = time.perf_counter()
                await sender.call_tool("send_message", {"session_id": session_id, "message": f"m{n}"})
                if calls is not None:
                    calls.append((time.perf_counter() - sent) * 1000)
            with anyio.fail_after(60):
                await done.wait()
            tg.cancel_scope.cancel()
    return delays


def _parse_iso(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _latest_seq(db: str, session_id: str) -> int:
    """The session's latest event number; `db` is the SQLite file or `<url>#<schema>`."""
    if "#" in db:
        url, _, schema = db.partition("#")
        with psycopg.connect(url) as pg:
            query = sql.SQL("SELECT event_seq FROM {}.sessions WHERE id = %s").format(sql.Identifier(schema))
            row = pg.execute(query, (session_id,)).fetchone()
            assert row is not None
            return int(row[0])
    connection = sqlite3.connect(db)
    (seq,) = connection.execute("SELECT event_seq FROM sessions WHERE id = ?", (session_id,)).fetchone()
    connection.close()
    return int(seq)


def _drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.postgres is None:
        return await _run(args, None)
    schema = f"bench_stream_{secrets.token_hex(4)}"
    try:
        return await _run(args, schema)
    finally:
        _drop_schema(args.postgres, schema)


async def _run(args: argparse.Namespace, schema: str | None) -> dict[str, Any]:
    figures: dict[str, Any] = {"machine": machine("sqlite"), "database": "postgres" if schema else "sqlite"}
    with tempfile.TemporaryDirectory(prefix="parley-bench-stream-") as tmp:
        directory = Path(tmp)
        settings = base_config(http={"stream_heartbeat_s": 15.0})
        if schema is not None:
            settings["storage"] = {"url": args.postgres, "schema": schema}
        config = write_config_files(directory, settings)
        db = directory / "parley.db"
        where = f"{args.postgres}#{schema}" if schema is not None else str(db)
        async with http_server(directory, config, directory / "a.log") as a:
            url = await wait_for_url(a, directory / "a.log")
            base = url.removesuffix("/mcp")
            async with Client(url) as client:
                started = await client.call_tool("start_session", {"agent": "demo", "message": "hello"})
                session_id = started.structured_content["session_id"]
                if not (args.latency_only or schema is not None):
                    figures.update(await _throughput_and_memory(args, db, base, a.pid, session_id))
                same = await _latencies(where, base, session_id, client, args.turns)
                print(f"latency, same process: {latency_summary(same)}")
            async with AsyncExitStack() as peers:
                # Servers that only share the database (they hear every wake-up, follow nothing).
                pids = []
                for n in range(args.peers):
                    log = directory / f"p{n}.log"
                    peer = await peers.enter_async_context(http_server(directory, config, log))
                    await wait_for_url(peer, log)
                    pids.append(peer.pid)
                b = await peers.enter_async_context(http_server(directory, config, directory / "b.log"))
                url_b = await wait_for_url(b, directory / "b.log")
                calls: list[float] = []
                async with Client(url_b) as other:
                    watched = (a.pid, b.pid, *pids)
                    cpu_before = [cpu_seconds(pid) for pid in watched]
                    cross = await _latencies(where, base, session_id, other, args.turns, calls)
                    spent = [cpu_seconds(pid) - s for pid, s in zip(watched, cpu_before, strict=True)]
                print(f"latency, another process: {latency_summary(cross)}")
                print(f"send_message through B, request to answer: {latency_summary(calls)}")
                per_turn = [round(s * 1000 / args.turns, 2) for s in spent]
                cpu = {"a_ms": per_turn[0], "b_ms": per_turn[1], "peers_ms": per_turn[2:]}
                print(
                    f"CPU per turn through B: A {cpu['a_ms']} ms, B {cpu['b_ms']} ms, peers {cpu['peers_ms']}"
                )
    figures["latency_same_process"] = latency_summary(same)
    figures["latency_other_process"] = latency_summary(cross)
    figures["cpu_per_turn_other_process"] = cpu
    figures["send_message_through_b"] = latency_summary(calls)
    figures["peers"] = args.peers
    return figures


async def _throughput_and_memory(
    args: argparse.Namespace, db: Path, base: str, pid: int, session_id: str
) -> dict[str, Any]:
    last = _add_events(db, session_id, args.events)
    async with httpx2.AsyncClient(timeout=120) as http:
        t0 = time.perf_counter()
        count = await _read_until(http, f"{base}/v1/sessions/{session_id}/events", last)
        elapsed = time.perf_counter() - t0
    throughput = count / elapsed
    print(f"throughput: {count} events in {elapsed:.2f}s = {throughput:,.0f} events/s (one stream, replay)")

    before = memory_kib(pid)["rss_kib"]
    async with anyio.create_task_group() as tg:
        opened = anyio.Semaphore(0)
        clients = [httpx2.AsyncClient(timeout=None) for _ in range(args.streams)]

        async def hold(http: httpx2.AsyncClient) -> None:
            async with http.stream(
                "GET",
                f"{base}/v1/sessions/{session_id}/events",
                headers={"Last-Event-ID": str(last)},
            ) as response:
                assert response.status_code == 200
                opened.release()
                await anyio.sleep_forever()

        for http in clients:
            tg.start_soon(hold, http)
        for _ in range(args.streams):
            await opened.acquire()
        await anyio.sleep(1.0)
        after = memory_kib(pid)["rss_kib"]
        tg.cancel_scope.cancel()
    for http in clients:
        await http.aclose()
    per_stream_kib = (after - before) / args.streams
    print(
        f"memory: {args.streams} idle streams: RSS {before} -> {after} KiB = {per_stream_kib:.1f} KiB per stream"
    )

    return {
        "events": args.events,
        "events_per_s": round(throughput),
        "streams": args.streams,
        "kib_per_stream": round(per_stream_kib, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--latency-only", action="store_true", help="skip throughput and memory")
    parser.add_argument("--peers", type=int, default=0, help="more servers on the database during the B run")
    parser.add_argument("--postgres", metavar="URL", help="PostgreSQL instead of SQLite (latency only)")
    print(json.dumps(anyio.run(main, parser.parse_args())))
