"""What parley.client adds to a turn, against the raw mcp SDK calls it wraps.

Starts one `parley serve --http` (default runtime settings, a fresh SQLite file in a temporary
directory) and, per transport, drives four sessions of the `demo` agent turn by turn:

- `raw`: `mcp.Client.call_tool("send_message", {...})`, reading `structured_content` as a dict;
- `raw+progress`: the same with a progress callback (the server then sends progress
  notifications, as it does for the client);
- `client`: `parley.client`'s `Session.send(...)`: a client_message_id, the typed `Outcome`, the
  reconnect wrapper (no progress: nobody listens);
- `client+events`: the same with an `on_event` callback (progress asked for, each notification
  read back as typed events).

The variants take turns call by call, in a rotating order, so they see the same machine. Over
stdio each variant has its own `parley serve` (the client starts its own; the raw ones share
one), each on its own database. Figures per variant: the client-side latency of a turn (p50,
p95), this process's CPU per turn (`time.process_time` around each call: the client side), and
over HTTP the server's CPU per turn (its /proc utime+stime around each call, summed).

    .venv/bin/python bench/client_overhead.py [--turns 200] [--transports http,stdio]

Prints readable lines, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from _common import (
    add_limit_options,
    base_config,
    checked,
    cpu_seconds,
    http_server,
    latency_summary,
    loadavg_1m,
    run_and_report,
    run_figures,
    server_log_excerpt,
    stdio_server_parameters,
    wait_for_url,
    write_config_files,
)
from mcp import Client

import parley.client as pc

VARIANTS = ("raw", "raw+progress", "client", "client+events")
WARM_UP = 10
Turn = Callable[[str], Awaitable[str]]


async def _ignore_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


def raw_turns(client: Client, session_id: str, progress: bool, timeout_s: float) -> Turn:
    async def turn(text: str) -> str:
        arguments = {"session_id": session_id, "message": text, "client_message_id": uuid.uuid4().hex}
        result = await client.call_tool(
            "send_message",
            arguments,
            read_timeout_seconds=timeout_s,
            progress_callback=_ignore_progress if progress else None,
        )
        return str(checked("send_message", result)["answer"])

    return turn


def _ignore_event(event: pc.Event) -> None:
    return None


def client_turns(session: pc.Session, events: bool) -> Turn:
    async def turn(text: str) -> str:
        return (await session.send(text, on_event=_ignore_event if events else None)).answer or ""

    return turn


@asynccontextmanager
async def variants(
    transport: str, workdir: Path, url: str | None, timeout_s: float
) -> AsyncIterator[dict[str, Turn]]:
    """The variants' turn functions, each on a fresh demo session."""
    async with AsyncExitStack() as stack:
        if transport == "http":
            assert url is not None
            raw: Any = url
            parley = await stack.enter_async_context(pc.connect_http(url))
        else:
            folder = workdir / "stdio-raw"
            folder.mkdir()
            config = write_config_files(folder, base_config())
            raw = stdio_server_parameters(folder, config, folder / "server.pid", folder / "server.log")
            client_folder = workdir / "stdio-client"
            client_folder.mkdir()
            client_config = write_config_files(client_folder, base_config())
            log = stack.enter_context((client_folder / "server.log").open("a"))
            parley = await stack.enter_async_context(pc.connect_stdio(client_config, server_log=log))
        mcp = await stack.enter_async_context(Client(raw))
        turns: dict[str, Turn] = {}
        for name in ("raw", "raw+progress"):
            started = checked("start_session", await mcp.call_tool("start_session", {"agent": "demo"}))
            turns[name] = raw_turns(mcp, started["session_id"], name == "raw+progress", timeout_s)
        for name in ("client", "client+events"):
            turns[name] = client_turns(await parley.start("demo"), name == "client+events")
        yield turns


async def measure(turns: dict[str, Turn], count: int, server_pid: int | None) -> dict[str, Any]:
    latency: dict[str, list[float]] = {v: [] for v in VARIANTS}
    own_cpu: dict[str, float] = dict.fromkeys(VARIANTS, 0.0)
    server_cpu: dict[str, float] = dict.fromkeys(VARIANTS, 0.0)
    for n in range(WARM_UP + count):
        order = VARIANTS[n % len(VARIANTS) :] + VARIANTS[: n % len(VARIANTS)]
        for name in order:
            server_before = cpu_seconds(server_pid) if server_pid else 0.0
            cpu_before, t0 = time.process_time(), time.perf_counter()
            answer = await turns[name](f"turn {n}")
            elapsed_ms = (time.perf_counter() - t0) * 1000
            cpu_ms = (time.process_time() - cpu_before) * 1000
            if f"You said: turn {n}" not in answer:
                raise RuntimeError(f"{name}: unexpected answer {answer!r}")
            if n >= WARM_UP:
                latency[name].append(elapsed_ms)
                own_cpu[name] += cpu_ms
                if server_pid:
                    server_cpu[name] += (cpu_seconds(server_pid) - server_before) * 1000
    figures: dict[str, Any] = {}
    for name in VARIANTS:
        figures[name] = {
            **latency_summary(latency[name]),
            "client_cpu_ms_per_turn": round(own_cpu[name] / count, 3),
            **({"server_cpu_ms_per_turn": round(server_cpu[name] / count, 3)} if server_pid else {}),
        }
    raw = figures["raw"]
    figures["client_minus_raw_p50_ms"] = round(figures["client"]["p50_ms"] - raw["p50_ms"], 2)
    figures["client_minus_raw_cpu_ms"] = round(
        figures["client"]["client_cpu_ms_per_turn"] - raw["client_cpu_ms_per_turn"], 3
    )
    with_progress = figures["raw+progress"]
    figures["client_events_minus_raw_progress_p50_ms"] = round(
        figures["client+events"]["p50_ms"] - with_progress["p50_ms"], 2
    )
    figures["client_events_minus_raw_progress_cpu_ms"] = round(
        figures["client+events"]["client_cpu_ms_per_turn"] - with_progress["client_cpu_ms_per_turn"], 3
    )
    return figures


async def run(workdir: Path, transports: list[str], count: int, timeout_s: float) -> dict[str, Any]:
    started, load_before = time.perf_counter(), loadavg_1m()
    config = write_config_files(workdir, base_config())
    log = workdir / "server.log"
    results: dict[str, Any] = {"turns": count, "warm_up": WARM_UP}
    async with http_server(workdir, config, log) as process:
        url = await wait_for_url(process, log)
        for transport in transports:
            async with variants(transport, workdir, url, timeout_s) as turns:
                pid = process.pid if transport == "http" else None
                results[transport] = await measure(turns, count, pid)
    return {**results, **run_figures(started, load_before, "mcp")}


def report(r: dict[str, Any]) -> None:
    print(
        f"parley.client against raw mcp SDK calls: {r['turns']} demo turns per variant (after {r['warm_up']})"
    )
    for transport in ("http", "stdio"):
        if transport not in r:
            continue
        print(f"  {transport}:")
        for name in VARIANTS:
            f = r[transport][name]
            server = (
                f"   server CPU {f['server_cpu_ms_per_turn']:6.3f} ms"
                if "server_cpu_ms_per_turn" in f
                else ""
            )
            print(
                f"    {name:<14} p50 {f['p50_ms']:7.2f} ms  p95 {f['p95_ms']:7.2f} ms"
                f"   client CPU {f['client_cpu_ms_per_turn']:6.3f} ms/turn{server}"
            )
        f = r[transport]
        print(
            f"    client - raw: p50 {f['client_minus_raw_p50_ms']:+.2f} ms, "
            f"client CPU {f['client_minus_raw_cpu_ms']:+.3f} ms per turn; client+events - raw+progress: "
            f"p50 {f['client_events_minus_raw_progress_p50_ms']:+.2f} ms, "
            f"client CPU {f['client_events_minus_raw_progress_cpu_ms']:+.3f} ms"
        )
    print(f"  load average {r['loadavg_1m_before']} -> {r['loadavg_1m_after']}, nproc {r['nproc']}")
    print(json.dumps(r, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="measured turns per variant (1..900)")
    parser.add_argument("--transports", default="http,stdio", help="http, stdio or both (comma-separated)")
    add_limit_options(parser, 900.0)
    args = parser.parse_args()
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not 1 <= args.turns <= 900 or not transports or set(transports) - {"http", "stdio"}:
        parser.error("--turns must be 1..900 (a demo session takes 1000) and --transports http and/or stdio")
    return run_and_report(
        lambda workdir: run(workdir, transports, args.turns, args.call_timeout),
        args.deadline,
        server_log_excerpt,
        report,
    )


if __name__ == "__main__":
    sys.exit(main())
