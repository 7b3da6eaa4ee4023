"""Parked sessions survive SIGKILL: an approval, a question, a durable wait and a decision made
with `parley approve` while no server runs all resolve after the restart, each tool running once."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import (
    FIXTURE_LOG,
    TEST_DEADLINE_S,
    Database,
    ServerProcess,
    call,
    eventually,
    fixture_in_process,
    fixture_runs,
    running_server,
)
from tests.test_approvals import write_world_config
from tests.test_e2e_approvals import parley_cli

pytestmark = pytest.mark.anyio


@pytest.fixture
async def fixture(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The fixture MCP server in the test's process (it outlives the killed server), logging to
    fixture.jsonl in `tmp_path`; its parley.yaml entry."""
    async with fixture_in_process(tmp_path / FIXTURE_LOG) as entry:
        yield entry


# Also on PostgreSQL: parked sessions, timers and a decision from the command line while no server runs.
@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_sessions_waiting_for_a_person_or_a_timer_survive_sigkill_and_resolve_once(
    tmp_path: Path, database: Database, fixture: dict[str, Any]
) -> None:
    config = write_world_config(tmp_path, fixture, database)
    db = database.db_arg
    async with ServerProcess(config, name="first", db=db) as server, server.client() as client:

        async def park(message: str) -> tuple[str, str]:
            outcome = await call(client, "start_session", agent="worker", message=message)
            assert outcome["status"] == "waiting_for_input", outcome
            return outcome["session_id"], outcome["pending"][0]["id"]

        approval_sid, approval_iid = await park('/tool fixture__append_note {"note": "after restart"}')
        question_sid, question_iid = await park("/ask Which colour? | red | blue")
        offline_sid, offline_iid = await park('/tool fixture__append_note {"note": "decided offline"}')
        timer_sid = (
            await call(client, "start_session", agent="worker", message="/wait 2 x", wait_seconds=0)
        )["session_id"]

        async def timer_set() -> bool:
            rows = database.rows("SELECT status FROM tool_calls WHERE session_id = ?", (timer_sid,))
            return rows == [("waiting_for_timer",)]

        await eventually(timer_set, "the durable wait to set its timer")
        server.send_signal(signal.SIGKILL)
        assert await server.wait_exit() == -signal.SIGKILL

    decided = await anyio.to_thread.run_sync(
        lambda: parley_cli(config, "approve", offline_sid, offline_iid, db=db)
    )
    assert decided.returncode == 0, decided.stderr
    pending = await anyio.to_thread.run_sync(lambda: parley_cli(config, "pending", db=db))
    assert pending.returncode == 0, pending.stderr
    assert approval_iid in pending.stdout and question_iid in pending.stdout
    assert offline_iid not in pending.stdout, "the offline decision is recorded"
    assert fixture_runs(tmp_path, "append_note", note="decided offline") == 0, "nothing runs without a server"

    async with running_server(config, name="second", db=db) as (_, client):
        approved = await call(
            client,
            "approve",
            session_id=approval_sid,
            decisions=[{"interrupt_id": approval_iid, "approved": True}],
        )
        assert approved["status"] == "answered", approved
        assert "appended after restart" in approved["answer"]

        answered = await call(
            client, "answer_question", session_id=question_sid, interrupt_id=question_iid, answer="red"
        )
        assert answered["status"] == "answered", answered
        assert "The user answered: red" in answered["answer"]

        woken = await call(client, "get_session", session_id=timer_sid, wait_seconds=TEST_DEADLINE_S)
        assert woken["status"] == "idle", woken
        assert woken["last_turn"]["status"] == "answered"
        assert "The wait is over; carry on." in woken["last_turn"]["answer"]

        offline = await call(client, "get_session", session_id=offline_sid, wait_seconds=TEST_DEADLINE_S)
        assert offline["status"] == "idle", offline
        assert offline["last_turn"]["status"] == "answered"
        assert "appended decided offline" in offline["last_turn"]["answer"]

    assert fixture_runs(tmp_path, "append_note", note="after restart") == 1
    assert fixture_runs(tmp_path, "append_note", note="decided offline") == 1
    resolved = database.rows(
        "SELECT session_id, status, resolved_by FROM interrupts WHERE session_id IN (?, ?, ?)",
        (approval_sid, question_sid, offline_sid),
    )
    assert sorted(resolved) == sorted(
        [
            (approval_sid, "approved", "caller"),
            (question_sid, "answered", "caller"),
            (offline_sid, "approved", "cli"),
        ]
    )
