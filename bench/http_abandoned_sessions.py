"""Abandoned MCP HTTP sessions: clients that initialize and never come back.

Starts `parley serve --http --port 0` on a fresh SQLite file in a temporary directory, with
`http.max_sessions` and `http.session_idle_timeout_s` from the command line (defaults: the
shipped defaults, 1000 sessions and 300 s), and `--auth none` (default) or `tokens` (one user,
whose token every request carries: the SDK binds each session to it). It then:

- posts N raw `initialize` requests (default 10,000; httpx2, 8 at a time) and never uses or
  deletes the sessions they open; counts the answers by status and times the loop;
- reads the server's VmRSS (/proc/<pid>/status) and `/healthz` `mcp_sessions` right after;
- connects a new client with the mcp SDK and calls `start_session` (does anyone get locked out?);
- waits until `mcp_sessions` is 0 (the idle timeout has passed) and reads VmRSS again;
- repeats this `--rounds` times (default 2): whether RSS keeps growing round after round shows
  whether the memory of expired sessions is reused.

Prints one JSON line with every figure.

    .venv/bin/python bench/http_abandoned_sessions.py [--sessions 10000] [--max-sessions 1000]
        [--idle-timeout 300] [--auth none|tokens] [--deadline 900]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx2
from _common import (
    base_config,
    http_server,
    machine,
    memory_kib,
    mib,
    stop_server,
    wait_for_url,
    write_config_files,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from parley.sdk_compat import create_mcp_http_client

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "abandoning-client", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PARALLEL = 8


async def healthz(url: str, auth: dict[str, str]) -> dict[str, Any]:
    """GET /healthz next to /mcp, with the token (whose parley:metrics scope sees the full report)."""
    async with httpx2.AsyncClient(timeout=10, headers=auth) as http:
        response = await http.get(url.removesuffix("/mcp") + "/healthz")
        response.raise_for_status()
        return dict(response.json())


async def abandon(url: str, count: int, auth: dict[str, str]) -> Counter[int]:
    statuses: Counter[int] = Counter()
    remaining = iter(range(count))
    async with httpx2.AsyncClient(timeout=60, headers=auth) as http:

        async def worker() -> None:
            for _ in remaining:
                response = await http.post(url, json=INITIALIZE, headers=HEADERS)
                statuses[response.status_code] += 1

        async with anyio.create_task_group() as tg:
            for _ in range(PARALLEL):
                tg.start_soon(worker)
    return statuses


async def one_round(url: str, pid: int, sessions: int, auth: dict[str, str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    statuses = await abandon(url, sessions, auth)
    loop_s = time.perf_counter() - t0
    after_abandon = memory_kib(pid)
    open_after = (await healthz(url, auth))["mcp_sessions"]
    t1 = time.perf_counter()
    async with (
        create_mcp_http_client(headers=auth) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("start_session", {"agent": "demo", "message": "let me in"})
    new_client_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    # The count lives in the server process; there is no event to await.
    while (await healthz(url, auth))["mcp_sessions"] > 0:  # noqa: ASYNC110
        await anyio.sleep(0.5)
    expired_s = time.perf_counter() - t2
    after_expiry = memory_kib(pid)
    return {
        "statuses": dict(statuses),
        "abandon_loop_s": round(loop_s, 1),
        "mcp_sessions_after_loop": open_after,
        "new_client_answered": not result.is_error,
        "new_client_s": round(new_client_s, 2),
        "all_expired_after_s": round(expired_s, 1),
        "rss_mib_after_abandon": mib(after_abandon["rss_kib"]),
        "rss_mib_after_expiry": mib(after_expiry["rss_kib"]),
        "peak_rss_mib": mib(after_expiry["hwm_kib"]),
    }


async def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    http_section = {"max_sessions": args.max_sessions, "session_idle_timeout_s": args.idle_timeout}
    sections: dict[str, Any] = {"http": http_section}
    auth: dict[str, str] = {}
    if args.auth == "tokens":
        token = "parley_" + secrets.token_urlsafe(32)
        digest = hashlib.sha256(token.encode()).hexdigest()
        entry = {"name": "bench", "sha256": digest, "scopes": ["parley:use", "parley:metrics"]}
        sections["auth"] = {"mode": "tokens", "tokens": [entry]}
        auth = {"Authorization": f"Bearer {token}"}
    config = write_config_files(directory, base_config(**sections))
    log = directory / "server.log"
    async with http_server(directory, config, log) as process:
        url = await wait_for_url(process, log)
        idle = memory_kib(process.pid)
        rounds = []
        for _ in range(args.rounds):
            rounds.append(await one_round(url, process.pid, args.sessions, auth))
        stopped = await stop_server(process)
    return {
        "sessions_abandoned": args.sessions,
        "max_sessions": args.max_sessions,
        "idle_timeout_s": args.idle_timeout,
        "auth": args.auth,
        "rss_idle_mib": mib(idle["rss_kib"]),
        "rounds": rounds,
        "stop": stopped,
        "machine": machine("mcp"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--max-sessions", type=int, default=1000)
    parser.add_argument("--idle-timeout", type=float, default=300.0)
    parser.add_argument(
        "--rounds", type=int, default=2, help="abandon, then wait for expiry, this many times"
    )
    parser.add_argument("--auth", choices=["none", "tokens"], default="none")
    parser.add_argument("--deadline", type=float, default=900.0)
    args = parser.parse_args()

    async def bounded() -> dict[str, Any]:
        import tempfile

        with anyio.fail_after(args.deadline), tempfile.TemporaryDirectory() as tmp:
            return await run(args, Path(tmp))

    print(json.dumps(anyio.run(bounded)))


if __name__ == "__main__":
    main()
