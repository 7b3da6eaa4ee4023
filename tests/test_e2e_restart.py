"""Sessions survive the end of the server process: stdin closed, SIGTERM, SIGKILL."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support import (
    STATE_WINDOW_S,
    TEST_DEADLINE_S,
    ServerProcess,
    call,
    db_rows,
    eventually,
    running_server,
    write_config,
)

pytestmark = pytest.mark.anyio

ENDINGS = ["stdin-closed", "sigterm", "sigkill"]


async def _end(server: ServerProcess, how: str) -> int:
    if how == "stdin-closed":
        await server.close_stdin()
    elif how == "sigterm":
        server.send_signal(signal.SIGTERM)
    else:
        server.send_signal(signal.SIGKILL)
    return await server.wait_exit()


@pytest.mark.parametrize("how", ENDINGS)
async def test_conversation_continues_after_the_server_ends(tmp_path: Path, how: str) -> None:
    config = write_config(tmp_path)
    async with ServerProcess(config, name="first") as server, server.client() as client:
        first = await call(client, "start_session", agent="demo", message="remember me")
        sid = first["session_id"]
        await call(client, "send_message", session_id=sid, message="second")
        code = await _end(server, how)
    assert code == (-signal.SIGKILL if how == "sigkill" else 0), server.log()

    async with running_server(config, name="second") as (_, client):
        snapshot = await call(client, "get_session", session_id=sid, messages_from=1)
        assert [m["text"] for m in snapshot["messages"]] == [
            "remember me",
            "You said: remember me (message 1 of this session)",
            "second",
            "You said: second (message 2 of this session)",
        ]
        third = await call(client, "send_message", session_id=sid, message="third")
        assert third["answer"] == "You said: third (message 3 of this session)"


@pytest.mark.parametrize("how", ENDINGS)
async def test_a_turn_ended_during_its_model_call_is_resumed_after_restart(tmp_path: Path, how: str) -> None:
    config = write_config(tmp_path)
    db = tmp_path / "parley.db"
    async with ServerProcess(config, name="first") as server, server.client() as client:
        # The model call must still run when the test ends the process once it sees it.
        slow = f"/sleep {STATE_WINDOW_S:g}\nsurvive"
        started = await call(client, "start_session", agent="demo", message=slow, wait_seconds=0)
        sid = started["session_id"]

        async def in_model_call() -> bool:
            rows = db_rows(db, "SELECT phase, current_turn_id FROM sessions WHERE id = ?", (sid,))
            return rows == [("model", rows[0][1])] and rows[0][1] is not None

        await eventually(in_model_call, "the turn to enter its model call")
        await _end(server, how)
    # Nothing of the interrupted model call was committed.
    assert db_rows(db, "SELECT COUNT(*) FROM steps WHERE session_id = ?", (sid,)) == [(0,)]

    async with running_server(config, name="second") as (_, client):
        snapshot = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        assert snapshot["status"] == "idle"
        assert snapshot["last_turn"]["status"] == "answered"
        assert snapshot["last_turn"]["answer"] == "You said: survive (message 1 of this session)"
    steps = db_rows(db, "SELECT step_no FROM steps WHERE session_id = ?", (sid,))
    assert steps == [(1,)], "the model call was committed exactly once"
