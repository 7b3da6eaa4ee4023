"""SIGTERM drains: a running step may finish within runtime.shutdown_grace_s; a longer one is
abandoned uncommitted, the process exits 0 promptly, and the next process answers the turn once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.support import ServerProcess, call, db_rows, eventually, running_server, write_config

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
