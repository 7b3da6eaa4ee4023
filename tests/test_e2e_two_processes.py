"""Two `parley serve` processes on one database, as two desktop client windows would run: one SQLite
file, and (the same tests) one PostgreSQL schema."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import pytest
from mcp import Client

from tests.conftest import database_for
from tests.support import TEST_DEADLINE_S, Database, ServerProcess, call, eventually, write_config

pytestmark = pytest.mark.anyio


@dataclass
class Pair:
    a: ServerProcess
    b: ServerProcess
    client_a: Client
    client_b: Client
    db: Database


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
async def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Pair]:
    directory = tmp_path_factory.mktemp("pair")
    with database_for(request.param, directory, "pair") as database:
        config = write_config(directory, database=database)
        async with (
            ServerProcess(config, name="a", db=database.db_arg) as a,
            ServerProcess(config, name="b", db=database.db_arg) as b,
            a.client() as client_a,
            b.client("legacy") as client_b,
        ):
            yield Pair(a, b, client_a, client_b, database)


async def test_a_session_started_through_one_process_continues_through_the_other(pair: Pair) -> None:
    first = await call(pair.client_a, "start_session", agent="demo", message="one")
    sid = first["session_id"]
    clients = [pair.client_b, pair.client_a, pair.client_b]
    for n, client in enumerate(clients, start=2):
        outcome = await call(client, "send_message", session_id=sid, message=f"turn {n}")
        assert outcome["answer"] == f"You said: turn {n} (message {n} of this session)"
    snapshot = await call(pair.client_a, "get_session", session_id=sid, messages_from=1)
    assert snapshot["total_messages"] == 8
    assert snapshot["usage"]["model_calls"] == 4


async def test_concurrent_messages_through_both_processes_never_run_a_step_twice(pair: Pair) -> None:
    sessions = [(await call(pair.client_a, "start_session", agent="demo"))["session_id"] for _ in range(6)]
    turns_per_session = 4

    async def talk(sid: str) -> None:
        for n in range(1, turns_per_session + 1):
            client = pair.client_a if n % 2 else pair.client_b
            outcome = await call(client, "send_message", session_id=sid, message=f"m{n}")
            assert outcome["answer"] == f"You said: m{n} (message {n} of this session)"

    async with anyio.create_task_group() as tg:
        for sid in sessions:
            tg.start_soon(talk, sid)

    for sid in sessions:
        steps = pair.db.rows("SELECT turn_id, step_no, process_id FROM steps WHERE session_id = ?", (sid,))
        turns = pair.db.rows("SELECT id FROM turns WHERE session_id = ?", (sid,))
        assert len(turns) == turns_per_session
        assert sorted(t for t, _, _ in steps) == sorted(t for (t,) in turns), (
            "exactly one model step per turn"
        )
        answers = pair.db.rows(
            "SELECT content FROM messages WHERE session_id = ? AND role = 'assistant' ORDER BY seq",
            (sid,),
        )
        assert len(answers) == turns_per_session
    drivers = {p for (p,) in pair.db.rows("SELECT DISTINCT process_id FROM steps")}
    assert drivers <= {pair.a.process_id(), pair.b.process_id()}


async def test_cancel_through_one_process_stops_a_turn_driven_by_the_other(pair: Pair) -> None:
    started = await call(
        pair.client_b, "start_session", agent="demo", message="/sleep 3600\nlong", wait_seconds=0
    )
    sid = started["session_id"]

    async def leased() -> bool:
        rows = pair.db.rows("SELECT lease_owner, phase FROM sessions WHERE id = ?", (sid,))
        return rows[0][0] is not None and rows[0][1] == "model"

    await eventually(leased, "a process to take the turn into its model call")
    token = pair.db.rows("SELECT lease_owner FROM sessions WHERE id = ?", (sid,))[0][0]
    driver_is_a = token.rpartition("#")[0] == pair.a.process_id()  # a lease token: "<process>#<epoch>"
    other = pair.client_b if driver_is_a else pair.client_a
    with anyio.fail_after(TEST_DEADLINE_S):
        cancelled = await call(other, "cancel_turn", session_id=sid)
    assert cancelled["status"] == "cancelled"
    snapshot = await call(other, "get_session", session_id=sid)
    assert snapshot["status"] == "idle"
    assert pair.db.rows("SELECT COUNT(*) FROM steps WHERE session_id = ?", (sid,)) == [(0,)]
