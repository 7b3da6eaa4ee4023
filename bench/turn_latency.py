"""Turn latency of one long session, measured end to end over MCP stdio.

Starts `parley serve` as a subprocess on a fresh SQLite file in a temporary directory (default
runtime settings), connects with the mcp SDK's `Client` (default mode), and drives ONE session
with the built-in `demo` agent for N plain-text turns: `start_session` with the first message,
then `send_message` for the others. Each call waits for the turn's answer, so a turn's latency
is the client-side time of one tool call, from request to answered result.

Prints readable lines, then one final JSON line with every figure.

    .venv/bin/python bench/turn_latency.py [--turns 300] [--deadline 900]

The script talks only to the local subprocess it starts, stops by itself, and is bounded by
--deadline (the whole run) and --call-timeout (each tool call).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _common import (
    add_limit_options,
    base_config,
    call,
    cpu_seconds,
    machine,
    percentile,
    read_server_pid,
    require_linux,
    stdio_server_parameters,
    write_config_files,
)
from mcp import Client

AGENT = "demo"
# The demo agent's per-agent limit (limits.max_turns) is 1000 turns per session.
MAX_TURNS = 1000
WINDOW = 20  # size of the "first" and "last" windows


def write_config(directory: Path) -> Path:
    """parley.yaml with a fresh database and the default runtime settings (nothing overridden)."""
    return write_config_files(directory, base_config())


def check_answer(outcome: dict[str, Any], turn: int) -> None:
    if outcome.get("status") != "answered":
        raise RuntimeError(f"turn {turn}: status {outcome.get('status')!r}, error {outcome.get('error')!r}")
    expected = f"(message {turn} of this session)"
    if expected not in (outcome.get("answer") or ""):
        raise RuntimeError(f"turn {turn}: unexpected answer {outcome.get('answer')!r}")


def file_size(path: Path) -> int | None:
    """Size in bytes, or None when the file does not exist (e.g. the WAL after a clean close)."""
    return path.stat().st_size if path.exists() else None


async def run(turns: int, call_timeout_s: float, workdir: Path) -> dict[str, Any]:
    config = write_config(workdir)
    pid_file, log = workdir / "server.pid", workdir / "server.log"
    db = workdir / "parley.db"
    params = stdio_server_parameters(workdir, config, pid_file, log)

    latencies_ms: list[float] = []
    started = time.perf_counter()
    async with Client(params) as client:
        connected = time.perf_counter()
        pid = read_server_pid(pid_file)
        cpu_before = cpu_seconds(pid)
        turns_started = time.perf_counter()

        t0 = time.perf_counter()
        outcome = await call(client, call_timeout_s, "start_session", agent=AGENT, message="turn 1")
        latencies_ms.append((time.perf_counter() - t0) * 1000)
        check_answer(outcome, 1)
        session_id = outcome["session_id"]

        for turn in range(2, turns + 1):
            t0 = time.perf_counter()
            outcome = await call(
                client, call_timeout_s, "send_message", session_id=session_id, message=f"turn {turn}"
            )
            latencies_ms.append((time.perf_counter() - t0) * 1000)
            check_answer(outcome, turn)

        turns_wall_s = time.perf_counter() - turns_started
        cpu_after = cpu_seconds(pid)
        last_usage = outcome.get("usage")
        db_bytes_live = file_size(db)
        wal_bytes_live = file_size(db.with_name(db.name + "-wal"))
    total_wall_s = time.perf_counter() - started

    first, last = latencies_ms[:WINDOW], latencies_ms[-WINDOW:]
    server_cpu_s = cpu_after - cpu_before
    return {
        "turns": turns,
        "agent": AGENT,
        "p50_ms": round(percentile(latencies_ms, 50), 2),
        "p95_ms": round(percentile(latencies_ms, 95), 2),
        "max_ms": round(max(latencies_ms), 2),
        "first_window": len(first),
        "first_p50_ms": round(percentile(first, 50), 2),
        "first_p95_ms": round(percentile(first, 95), 2),
        "last_window": len(last),
        "last_p50_ms": round(percentile(last, 50), 2),
        "last_p95_ms": round(percentile(last, 95), 2),
        "startup_s": round(connected - started, 3),
        "turns_wall_s": round(turns_wall_s, 3),
        "total_wall_s": round(total_wall_s, 3),
        "server_cpu_s": round(server_cpu_s, 3),
        "server_cpu_ms_per_turn": round(server_cpu_s / turns * 1000, 3),
        "last_turn_usage": last_usage,
        "db_bytes_live": db_bytes_live,
        "wal_bytes_live": wal_bytes_live,
        "db_bytes_after_exit": file_size(db),
        "wal_bytes_after_exit": file_size(db.with_name(db.name + "-wal")),
        **machine(),
    }


def _size(n: int | None) -> str:
    return "no file" if n is None else f"{n} bytes"


def report(r: dict[str, Any]) -> None:
    print(f"parley turn latency: {r['turns']} text turns in one '{r['agent']}' session over MCP stdio")
    print(
        f"  all turns        p50 {r['p50_ms']:8.2f} ms   p95 {r['p95_ms']:8.2f} ms   max {r['max_ms']:.2f} ms"
    )
    print(
        f"  first {r['first_window']:<3} turns  p50 {r['first_p50_ms']:8.2f} ms   p95 {r['first_p95_ms']:8.2f} ms"
    )
    print(
        f"  last {r['last_window']:<3} turns   p50 {r['last_p50_ms']:8.2f} ms   p95 {r['last_p95_ms']:8.2f} ms"
    )
    print(f"  server start + MCP handshake  {r['startup_s']:.3f} s")
    print(f"  wall time of the turns        {r['turns_wall_s']:.3f} s")
    print(f"  total wall time (incl. start and shutdown)  {r['total_wall_s']:.3f} s")
    print(
        f"  server CPU during the turns   {r['server_cpu_s']:.3f} s"
        f" = {r['server_cpu_ms_per_turn']:.3f} ms per turn"
    )
    print(f"  usage reported for the last turn  {r['last_turn_usage']}")
    print(f"  database while serving  {r['db_bytes_live']} bytes (+ WAL: {_size(r['wal_bytes_live'])})")
    print(
        f"  database after exit     {r['db_bytes_after_exit']} bytes (+ WAL: {_size(r['wal_bytes_after_exit'])})"
    )
    print(f"  machine  nproc {r['nproc']}, Python {r['python']}")
    print(json.dumps(r, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help=f"turns in the session (1..{MAX_TURNS})")
    add_limit_options(parser, 900.0)
    args = parser.parse_args()
    if not 1 <= args.turns <= MAX_TURNS:
        parser.error(f"--turns must be 1..{MAX_TURNS} (the demo agent's turns per session)")
    require_linux(parser, "stat")

    with tempfile.TemporaryDirectory(prefix="parley-bench-") as tmp:
        workdir = Path(tmp)

        async def bounded() -> dict[str, Any]:
            with anyio.fail_after(args.deadline):
                return await run(args.turns, args.call_timeout, workdir)

        try:
            result = anyio.run(bounded)
        except Exception as exc:
            log = workdir / "server.log"
            tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no server log)"
            print(f"benchmark failed: {exc!r}\n--- server log (tail) ---\n{tail}", file=sys.stderr)
            return 1
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
