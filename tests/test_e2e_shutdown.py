"""SIGTERM drains: a running step may finish within runtime.shutdown_grace_s; a longer one is
abandoned uncommitted, the process exits 0 promptly, and the next process answers the turn once.

Closing stdin is the client leaving: parley answers what it read before, with what it has, and
exits within a second (the SDK's stdio client kills a server that takes 2 s), cleanly: leases
released, downstream servers stopped, the database closed so that no -wal file is left.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.support import (
    FIXTURE_LOG,
    REPO,
    TEST_DEADLINE_S,
    Gate,
    ServerProcess,
    call,
    db_rows,
    eventually,
    fixture_calls,
    fixture_server,
    running_server,
    write_config,
)

pytestmark = pytest.mark.anyio

EXIT_MARGIN_S = 5.0


async def _wait_for_model_call(db: Path, session_id: str) -> None:
    async def in_model_call() -> bool:
        rows = db_rows(db, "SELECT phase, current_turn_id FROM sessions WHERE id = ?", (session_id,))
        return bool(rows) and rows[0][0] == "model" and rows[0][1] is not None

    await eventually(in_model_call, "the turn to enter its model call")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_sigterm_past_the_grace_exits_promptly_and_the_next_process_answers_the_turn_once(
    tmp_path: Path, transport: str
) -> None:
    grace_s = 0.5
    config = write_config(tmp_path, runtime={"shutdown_grace_s": grace_s})
    db = tmp_path / "parley.db"
    http = transport == "http"
    async with ServerProcess(config, name="first", http=http) as server:
        async with server.client() as client:
            started = await call(
                client, "start_session", agent="demo", message="/sleep 3\nsurvive", wait_seconds=0
            )
            sid = started["session_id"]
            await _wait_for_model_call(db, sid)
        signalled = anyio.current_time()
        server.send_signal(signal.SIGTERM)
        code = await server.wait_exit()
        elapsed = anyio.current_time() - signalled
        log = server.log()
    assert code == 0, log
    assert elapsed < grace_s + EXIT_MARGIN_S, f"exit took {elapsed:.1f}s\n{log}"
    assert db_rows(db, "SELECT COUNT(*) FROM steps WHERE session_id = ?", (sid,)) == [(0,)], (
        "the abandoned model call must not be committed"
    )

    async with running_server(config, name="second", http=http) as (_, client):
        snapshot = await call(client, "get_session", session_id=sid, wait_seconds=20)
    assert snapshot["status"] == "idle"
    assert snapshot["last_turn"]["status"] == "answered"
    assert snapshot["last_turn"]["answer"] == "You said: survive (message 1 of this session)"
    assert [m["role"] for m in snapshot["messages"]] == ["user", "assistant"]
    assert db_rows(db, "SELECT COUNT(*) FROM steps WHERE session_id = ?", (sid,)) == [(1,)], (
        "the model call was committed exactly once"
    )


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_sigterm_within_the_grace_lets_the_running_step_finish_and_the_turn_is_answered(
    tmp_path: Path, transport: str
) -> None:
    config = write_config(tmp_path, runtime={"shutdown_grace_s": 5.0})
    db = tmp_path / "parley.db"
    async with ServerProcess(config, name="graceful", http=transport == "http") as server:
        async with server.client() as client:
            started = await call(
                client, "start_session", agent="demo", message="/sleep 0.5\nfinish me", wait_seconds=0
            )
            sid = started["session_id"]
            await _wait_for_model_call(db, sid)
        signalled_at = time.time()
        server.send_signal(signal.SIGTERM)
        code = await server.wait_exit()
        log = server.log()
    assert code == 0, log

    # Read after exit: the step running when the signal came was committed, and its turn ended.
    steps = db_rows(db, "SELECT created_at FROM steps WHERE session_id = ?", (sid,))
    assert len(steps) == 1, log
    assert steps[0][0] >= signalled_at, "the step should have been committed during the grace period"
    turns = db_rows(db, "SELECT status, answer FROM turns WHERE session_id = ?", (sid,))
    assert turns == [("answered", "You said: finish me (message 1 of this session)")], log
    sessions = db_rows(db, "SELECT status, current_turn_id FROM sessions WHERE id = ?", (sid,))
    assert sessions == [("idle", None)]


# How soon after stdin closes parley must have exited: the SDK's stdio client waits 2 s, then kills.
CLIENT_GONE_EXIT_S = 1.0
# The default grace of a SIGTERM: a client closing stdin must not wait it out.
LONG_GRACE = {"shutdown_grace_s": 10.0}


def _line(ident: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if ident is not None:
        message["id"] = ident
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode() + b"\n"


async def test_closing_stdin_right_after_requests_answers_them_and_exits_within_a_second(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, runtime=LONG_GRACE)
    initialize = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "leaves-at-once", "version": "0"},
    }
    async with ServerProcess(config, name="eof") as server:
        stdin, stdout = server.process.stdin, server.process.stdout
        assert stdin is not None and stdout is not None
        output = b""

        async def answer_to(ident: int) -> dict[str, Any]:
            nonlocal output
            with anyio.fail_after(TEST_DEADLINE_S):
                while True:
                    for message in map(json.loads, output.splitlines()):
                        if message.get("id") == ident and output.endswith(b"\n"):
                            return dict(message)
                    output += await stdout.receive()

        await stdin.send(_line(1, "initialize", initialize) + _line(None, "notifications/initialized"))
        await answer_to(1)
        start = {
            "name": "start_session",
            "arguments": {"agent": "demo", "message": "hello", "wait_seconds": 0},
        }
        await stdin.send(_line(2, "tools/call", start))
        sid = (await answer_to(2))["result"]["structuredContent"]["session_id"]
        send = {"session_id": sid, "message": "/sleep 5\nstill thinking", "wait_seconds": 30}
        await stdin.send(
            _line(3, "tools/call", {"name": "send_message", "arguments": send}) + _line(4, "ping")
        )
        await server.close_stdin()
        closed = anyio.current_time()
        code = await server.wait_exit()
        elapsed = anyio.current_time() - closed
        async for chunk in stdout:
            output += chunk
        log = server.log()
    answers = {m["id"]: m for m in map(json.loads, output.splitlines())}
    assert sorted(answers) == [1, 2, 3, 4], f"{output!r}\n{log}"
    assert answers[4]["result"] == {}
    sent = answers[3]["result"]["structuredContent"]
    # The 30 s wait was not waited out: the turn as it was when the client left.
    assert sent["status"] == "running" and sent["session_id"] == sid, sent
    assert code == 0, log
    assert elapsed < CLIENT_GONE_EXIT_S, f"exit took {elapsed:.2f}s after stdin closed\n{log}"
    assert "stopped" in log
    assert not (tmp_path / "parley.db-wal").exists(), "the database was not closed cleanly"
    # The lease was released: the next process takes the turn over at once, not after the TTL.
    assert db_rows(tmp_path / "parley.db", "SELECT lease_owner FROM sessions") == [(None,)]


async def test_leaving_the_sdk_stdio_client_mid_downstream_call_exits_cleanly_within_a_second(
    tmp_path: Path,
) -> None:
    log, pids, exit_code = tmp_path / FIXTURE_LOG, tmp_path / "fixture.pids", tmp_path / "exit.code"
    fixture = fixture_server(log)
    fixture["env"]["FIXTURE_STARTED"] = str(pids)
    config = write_config(
        tmp_path,
        runtime=LONG_GRACE,
        agents={"worker": {"mcp_servers": ["fixture"]}},
        mcp_servers={"fixture": fixture},
    )
    parley_log = tmp_path / "parley.log"
    # A shell around parley keeps its exit code, which the SDK's client does not tell.
    serve = [sys.executable, "-m", "parley", "serve", "--config", str(config), "--log-level", "DEBUG"]
    params = StdioServerParameters(
        command="sh",
        args=["-c", '"$@" 2>>"$PARLEY_LOG"; echo $? >"$EXIT_CODE"', "sh", *serve],
        env={**os.environ, "PARLEY_LOG": str(parley_log), "EXIT_CODE": str(exit_code)},
        cwd=REPO,
    )
    gate = Gate(tmp_path / "never-opened")
    async with Client(params) as client:
        started = await call(
            client, "start_session", agent="worker", message=gate.tool_line(), wait_seconds=0
        )

        async def calling_downstream() -> bool:
            return any(c["tool"] == "gate" for c in fixture_calls(log))

        await eventually(calling_downstream, "the turn to call the downstream tool")
        left = anyio.current_time()
    elapsed = anyio.current_time() - left
    text = parley_log.read_text()
    assert exit_code.exists(), f"parley was killed after {elapsed:.2f}s\n{text}"
    assert exit_code.read_text().strip() == "0", text
    assert elapsed < CLIENT_GONE_EXIT_S, f"exit took {elapsed:.2f}s after stdin closed\n{text}"
    assert "stopped" in text
    assert not (tmp_path / "parley.db-wal").exists(), "the database was not closed cleanly"
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the downstream server is gone with parley
    rows = db_rows(
        tmp_path / "parley.db", "SELECT lease_owner FROM sessions WHERE id = ?", (started["session_id"],)
    )
    assert rows == [(None,)], "the lease was not released"
    # The call cut by the exit is left as a crash leaves it: the next process retries a read
    # instead of finding it failed with "the call did not run" (it may have run).
    calls = db_rows(tmp_path / "parley.db", "SELECT name, status FROM tool_calls WHERE name LIKE '%gate'")
    assert [status for _, status in calls] == ["running"], calls
