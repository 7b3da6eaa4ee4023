"""Three `parley serve --http` replicas on one PostgreSQL schema: any replica answers any call,
whichever replica drives the turn, and the answer comes when the turn ends, not at the next poll.

Every replica here polls only every SLOW_POLL_S (work scan, waits, lease keepers): a call that
returns well before that was woken by LISTEN/NOTIFY. Clients of 2026-07-28 go through a balancer
with no affinity at all (each request to the next replica, a retry of an input-required round
included); a 2025-11-25 client with its SSE stream goes through a sticky one (README: "Several
replicas behind one address").
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client

from tests.conftest import database_for
from tests.http_balancer import Balancer
from tests.support import (
    FIXTURE_LOG,
    TEST_DEADLINE_S,
    Database,
    ServerProcess,
    call,
    eventually,
    fixture_runs,
    fixture_server,
    write_config,
)
from tests.task_client import call_tool_as_task, get_task, task_client, task_result
from tests.test_e2e_approvals import Person, parley_cli

pytestmark = pytest.mark.anyio

# Longer than any wait below may take: reaching the end of one proves a NOTIFY woke it.
SLOW_POLL_S = 20.0
PROMPT_S = SLOW_POLL_S / 2
STATE_KEYS_ENV = "PARLEY_TEST_STATE_KEYS"


@dataclass
class Replicas:
    servers: list[ServerProcess]
    db: Database
    directory: Path

    def process_ids(self) -> list[str]:
        return [s.process_id() for s in self.servers]

    def driver_of(self, sid: str) -> int | None:
        """The index of the replica whose lease the session's row names, if any."""
        [(owner,)] = self.db.rows("SELECT lease_owner FROM sessions WHERE id = ?", (sid,))
        if owner is None:
            return None
        process = str(owner).rpartition("#")[0]
        return self.process_ids().index(process)

    def client(self, index: int, **options: Any) -> Client:
        url = self.servers[index].url
        assert url is not None
        return Client(url, **options)

    def runs(self, tool: str, **arguments: Any) -> int:
        return fixture_runs(self.directory, tool, **arguments)


@pytest.fixture(scope="module")
async def replicas(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Replicas]:
    directory = tmp_path_factory.mktemp("replicas")
    with database_for("postgres", directory, "replicas") as database:
        config = write_config(
            directory,
            database=database,
            # The lease keeper looks for cancels at most every third of the lease: slow too.
            runtime={"poll_interval_s": SLOW_POLL_S, "lease_ttl_s": 3 * SLOW_POLL_S},
            storage={"listen_poll_interval_s": SLOW_POLL_S, "pool_size": 4},
            agents={"worker": {"mcp_servers": ["fixture"], "tools": ["ask_user"]}},
            mcp_servers={"fixture": fixture_server(directory / FIXTURE_LOG)},
            http={"request_state_keys_env": STATE_KEYS_ENV},
        )
        env = {STATE_KEYS_ENV: os.urandom(16).hex()}
        async with (
            ServerProcess(config, name="r0", http=True, db=database.db_arg, env=env) as r0,
            ServerProcess(config, name="r1", http=True, db=database.db_arg, env=env) as r1,
            ServerProcess(config, name="r2", http=True, db=database.db_arg, env=env) as r2,
        ):
            yield Replicas([r0, r1, r2], database, directory)


async def _timed(work: Awaitable[dict[str, Any]]) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    result = await work
    return result, time.monotonic() - started


async def _driven(replicas: Replicas, sid: str) -> int:
    """The replica that took the session's turn into its model call."""
    found: list[int] = []

    async def leased() -> bool:
        [(phase,)] = replicas.db.rows("SELECT phase FROM sessions WHERE id = ?", (sid,))
        driver = replicas.driver_of(sid)
        if driver is not None and phase == "model":
            found.append(driver)
        return bool(found)

    await eventually(leased, "a replica to take the turn into its model call")
    return found[0]


async def test_a_wait_on_any_replica_returns_when_another_replica_ends_the_turn(replicas: Replicas) -> None:
    async with replicas.client(0) as client:
        started = await call(client, "start_session", agent="demo", message="/sleep 1\nhello", wait_seconds=0)
    sid = started["session_id"]
    driver = await _driven(replicas, sid)
    waiter = (driver + 1) % 3
    async with replicas.client(waiter) as client:
        snapshot, took = await _timed(
            call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        )
    assert snapshot["status"] == "idle" and snapshot["last_turn"]["status"] == "answered"
    assert took < PROMPT_S, f"the wait on replica {waiter} took {took:.1f}s: not woken by replica {driver}"


async def test_a_blocking_message_through_one_replica_is_answered_by_the_one_that_drives(
    replicas: Replicas,
) -> None:
    async with replicas.client(0) as client:
        started = await call(client, "start_session", agent="demo", message="/sleep 1\nfirst", wait_seconds=0)
    sid = started["session_id"]
    driver = await _driven(replicas, sid)
    sender = (driver + 2) % 3
    # Queued behind the running turn: the replica that drives it takes this message next.
    async with replicas.client(sender) as client:
        answered, took = await _timed(call(client, "send_message", session_id=sid, message="second"))
    assert answered["status"] == "answered"
    assert answered["answer"] == "You said: second (message 2 of this session)"
    assert took < PROMPT_S, f"replica {sender} heard of the answer after {took:.1f}s"


async def test_a_cancel_through_one_replica_stops_the_model_call_on_another_at_once(
    replicas: Replicas,
) -> None:
    async with replicas.client(1) as client:
        started = await call(
            client, "start_session", agent="demo", message="/sleep 3600\nlong", wait_seconds=0
        )
    sid = started["session_id"]
    driver = await _driven(replicas, sid)
    async with replicas.client((driver + 1) % 3) as client:
        cancelled, took = await _timed(call(client, "cancel_turn", session_id=sid))
    assert cancelled["status"] == "cancelled"
    assert took < PROMPT_S, f"the cancel reached replica {driver} after {took:.1f}s"
    assert replicas.db.rows("SELECT lease_owner FROM sessions WHERE id = ?", (sid,)) == [(None,)]


async def test_an_approval_from_the_command_line_wakes_a_replica_at_once(replicas: Replicas) -> None:
    async with replicas.client(2) as client:
        parked = await call(
            client, "start_session", agent="worker", message='/tool fixture__append_note {"note": "from cli"}'
        )
        assert parked["status"] == "waiting_for_input", parked
        sid, iid = parked["session_id"], parked["pending"][0]["id"]
        config = replicas.servers[0].config_path
        decided = await anyio.to_thread.run_sync(
            lambda: parley_cli(config, "approve", sid, iid, db=replicas.db.db_arg)
        )
        assert decided.returncode == 0, decided.stderr
        done, took = await _timed(call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S))
    assert done["status"] == "idle" and "appended from cli" in done["last_turn"]["answer"]
    assert took < PROMPT_S, f"no replica took the approved session for {took:.1f}s"
    assert replicas.runs("append_note", note="from cli") == 1


async def test_a_task_started_on_one_replica_is_read_and_awaited_on_another(replicas: Replicas) -> None:
    async with task_client(replicas.servers[0].url, mode="legacy") as (client, _):
        sid = (await call(client, "start_session", agent="demo"))["session_id"]
        task = await call_tool_as_task(
            client, "send_message", {"session_id": sid, "message": "/sleep 1\ntasked"}
        )
    async with task_client(replicas.servers[1].url, mode="legacy") as (client, _):
        seen = await get_task(client, task["taskId"])
        assert seen["taskId"] == task["taskId"] and seen["status"] in ("working", "completed")
        result, took = await _timed(task_result(client, task["taskId"]))
    assert result["structuredContent"]["answer"] == "You said: tasked (message 1 of this session)"
    assert took < PROMPT_S, f"tasks/result on another replica returned after {took:.1f}s"


async def test_a_2026_client_needs_no_affinity_an_input_required_retry_lands_on_another_replica(
    replicas: Replicas,
) -> None:
    asked: list[str] = []

    async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    balancer = Balancer([s.base_url for s in replicas.servers if s.url], sticky=False)
    async with balancer.running(), Client(balancer.url, elicitation_callback=on_elicit) as client:
        assert client.protocol_version == "2026-07-28"
        outcome = await call(
            client, "start_session", agent="worker", message='/tool fixture__append_note {"note": "mrtr"}'
        )
        again = await call(client, "send_message", session_id=outcome["session_id"], message="and then")
    assert outcome["status"] == "answered" and "appended mrtr" in outcome["answer"], outcome
    assert again["answer"] == "You said: and then (message 2 of this session)"
    assert any("fixture__append_note" in m for m in asked)
    assert replicas.runs("append_note", note="mrtr") == 1
    calls = [backend for backend, method in balancer.routed if method == "POST"]
    assert len(set(calls)) > 1, f"every request reached one replica: {balancer.routed}"


async def test_a_2025_client_with_its_sse_stream_works_through_a_sticky_balancer(replicas: Replicas) -> None:
    person = Person.accepting({"decision": "approve"})
    notes: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    balancer = Balancer([s.base_url for s in replicas.servers if s.url], sticky=True)
    async with balancer.running(), Client(balancer.url, mode="legacy", elicitation_callback=person) as client:
        message = '/sleep 1\n/tool fixture__append_note {"note": "sticky"}'
        result = await client.call_tool(
            "start_session", {"agent": "worker", "message": message}, progress_callback=on_progress
        )
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["status"] == "answered", result.structured_content
    assert len(person.asked) == 1, "the approval was put to the person over the client's own stream"
    assert notes, "progress notifications arrived over the stream"
    assert replicas.runs("append_note", note="sticky") == 1
    assert len({backend for backend, _ in balancer.routed}) == 1, "one MCP session, one replica"
