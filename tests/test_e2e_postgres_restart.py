"""The database goes away and comes back under two `parley serve --http` replicas: a PostgreSQL
server of the test's own (tests/postgres_support.py PrivatePostgres) is stopped at once
(`pg_ctl stop -m immediate`: every server process killed, as in a crash) while a turn is in its
model call, a caller waits on it and another session waits for an approval, then started again.
Callers get a clear error meanwhile, and afterwards every turn resumes, the waiting caller gets its
answer by calling again, the approval runs its tool once, and nothing written before is lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from parley.tls import http_client
from tests.postgres_support import PrivatePostgres
from tests.support import (
    FIXTURE_LOG,
    STATE_WINDOW_S,
    TEST_DEADLINE_S,
    Database,
    ServerProcess,
    call,
    eventually,
    fixture_runs,
    fixture_server,
    write_config,
)

pytestmark = pytest.mark.anyio

UNREACHABLE = "cannot be reached"


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    with PrivatePostgres() as server:
        yield server


async def _tool(client: Client, tool: str, **arguments: Any) -> tuple[bool, str, dict[str, Any] | None]:
    """(is_error, text, structured content) of a call that may fail."""
    with anyio.fail_after(2 * TEST_DEADLINE_S):
        result = await client.call_tool(tool, arguments)
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    return result.is_error, text, result.structured_content


async def _health(server: ServerProcess) -> tuple[int, dict[str, Any]]:
    assert server.url is not None
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        answer = await http.get(server.url.replace("/mcp", "/healthz"))
    return answer.status_code, dict(answer.json())


async def test_the_database_stopped_and_started_under_two_replicas_loses_nothing(
    postgres: PrivatePostgres, tmp_path: Path
) -> None:
    database = Database(url=postgres.url, schema="public")
    config = write_config(
        tmp_path,
        database=database,
        runtime={"lease_ttl_s": 1.0},
        # Calls fail fast while the database is away; listening is checked often.
        storage={"connect_retry_s": 1, "listen_poll_interval_s": 0.5, "pool_size": 4},
        agents={"worker": {"mcp_servers": ["fixture"]}},
        mcp_servers={"fixture": fixture_server(tmp_path / FIXTURE_LOG)},
    )
    a = ServerProcess(config, name="a", http=True, db=database.db_arg)
    b = ServerProcess(config, name="b", http=True, db=database.db_arg)
    async with a, b, a.client() as client_a, b.client() as client_b:
        earlier = await call(client_a, "start_session", agent="demo", message="before the outage")
        parked = await call(
            client_a,
            "start_session",
            agent="worker",
            message='/tool fixture__append_note {"note": "survives"}',
        )
        assert parked["status"] == "waiting_for_input"

        # A caller waits on a turn whose model call outlasts the database.
        slow = f"/sleep {STATE_WINDOW_S:g}\nslow"
        waited: list[tuple[bool, str, dict[str, Any] | None]] = []
        async with anyio.create_task_group() as tg:

            async def wait_on_slow() -> None:
                waited.append(
                    await _tool(
                        client_b, "start_session", agent="demo", message=slow, client_message_id="slow-1"
                    )
                )

            tg.start_soon(wait_on_slow)

            async def in_model_call() -> bool:
                rows = database.rows("SELECT count(*) FROM sessions WHERE phase = 'model'")
                return rows == [(1,)]

            await eventually(in_model_call, "the slow turn to enter its model call")
            postgres.stop("immediate")

        # Meanwhile: the waiting caller and any new call get an error that names the database.
        [(failed, text, _)] = waited
        assert failed and UNREACHABLE in text and "call again" in text, text
        refused, text, _ = await _tool(client_a, "start_session", agent="demo", message="while away")
        assert refused and UNREACHABLE in text, text
        for server in (a, b):

            async def unavailable(server: ServerProcess = server) -> bool:
                code, report = await _health(server)
                return code == 503 and report["storage"] == "unreachable"

            await eventually(unavailable, "/healthz to answer 503 while the database is away")

        async def step_failed() -> bool:
            return any("driving session" in s.log() and "failed; retrying" in s.log() for s in (a, b))

        await eventually(step_failed, "the slow turn's step to meet the missing database")
        postgres.start()

        for server in (a, b):

            async def healthy(server: ServerProcess = server) -> bool:
                code, report = await _health(server)
                return code == 200 and report["status"] == "ok"

            await eventually(healthy, "/healthz to answer 200 again")

        # The caller calls again with the same client_message_id: the turn resumed and answers.
        again = await call(client_a, "start_session", agent="demo", message=slow, client_message_id="slow-1")
        assert again["status"] == "answered", again
        assert again["answer"] == "You said: slow (message 1 of this session)"
        approved = await call(
            client_b,
            "approve",
            session_id=parked["session_id"],
            decisions=[{"interrupt_id": parked["pending"][0]["id"], "approved": True}],
        )
        assert approved["status"] == "answered" and "appended survives" in approved["answer"]
        before = await call(client_b, "get_session", session_id=earlier["session_id"], messages_from=1)
        assert [m["text"] for m in before["messages"]] == [
            "before the outage",
            "You said: before the outage (message 1 of this session)",
        ]
        fresh = await call(client_b, "start_session", agent="demo", message="after")
        assert fresh["answer"] == "You said: after (message 1 of this session)"
        logs = {name: server.log() for name, server in (("a", a), ("b", b))}

    assert fixture_runs(tmp_path, "append_note", note="survives") == 1
    slow_sid = again["session_id"]
    assert database.rows("SELECT count(*) FROM steps WHERE session_id = ?", (slow_sid,)) == [(1,)]
    assert database.rows("SELECT count(*) FROM turns WHERE session_id = ?", (slow_sid,)) == [(1,)]
    assert database.rows("SELECT count(*) FROM sessions WHERE status = 'running'") == [(0,)]
    # Each replica's listener noticed the outage and listened again (wake-ups work as before).
    for name, log in logs.items():
        assert "cannot listen for other replicas' changes" in log, name
        assert "listening for other replicas' changes again" in log, name
        # The outage is told in one-line warnings, not tracebacks.
        assert "Traceback" not in log, name
