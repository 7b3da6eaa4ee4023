"""parley.testing itself: the in-process app on the composition root of `parley serve`, its MCP
client in memory (both generations), HTTP on a loopback port, the scripted and held models, in-process
tool servers, the manual clock and armed fault points."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from parley.testing import (
    DEADLINE_S,
    FaultPoints,
    HeldModel,
    ManualClock,
    ParleyUnderTest,
    ScriptedModel,
    ToolServer,
    call,
    calls_tool,
    eventually,
    parley_app,
    reply,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_demo_agent_answers_over_an_in_memory_client(mode: str, tmp_path: Path) -> None:
    async with parley_app(directory=tmp_path) as parley, parley.mcp(mode) as client:
        started = await call(client, "start_session", agent="demo", message="hello")
    assert started["status"] == "answered"
    assert started["answer"] == "You said: hello (message 1 of this session)"
    assert (tmp_path / "parley.db").exists(), "the store is a real SQLite file in the test's folder"


async def test_a_scripted_model_calls_a_tool_that_needs_approval_and_runs_once_approved() -> None:
    tools = ToolServer("shop")

    @tools.tool(destructive=True)
    async def refund(order: str, cents: int) -> str:
        """Refund an order."""
        return f"refunded {cents} on {order}"

    model = ScriptedModel([calls_tool("shop__refund", {"order": "A-1", "cents": 250}), reply("Done.")])
    async with tools.serve():
        config = {"mcp_servers": {"shop": tools.entry}}
        agents = {"clerk": {"mcp_servers": ["shop"]}}
        async with parley_app(config, agents=agents, model=model) as parley, parley.mcp() as client:
            parked = await call(client, "start_session", agent="clerk", message="refund A-1")
            assert parked["status"] == "waiting_for_input"
            assert tools.calls == [], "nothing runs before a person approves"
            [pending] = parked["pending"]
            decision = {"interrupt_id": pending["id"], "approved": True}
            done = await call(client, "approve", session_id=parked["session_id"], decisions=[decision])
    assert done["status"] == "answered" and done["answer"] == "Done."
    [ran] = tools.ran("refund")
    assert ran.arguments == {"order": "A-1", "cents": 250}
    assert ran.idempotency_key, "parley names each call with a key of its own"
    model.assert_complete()
    tool_result = model.requests[1].messages[-1]
    assert tool_result.role == "tool" and "refunded 250 on A-1" in tool_result.text


async def test_http_serves_healthz_v1_and_mcp_in_process() -> None:
    async with parley_app() as parley:
        endpoint = await parley.http()
        async with endpoint.client() as http:
            health = await http.get("/healthz")
            created = await http.post("/v1/sessions", json={"agent": "demo", "message": "hi"})
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert created.status_code == 201, created.text


async def test_a_manual_clock_ends_a_durable_wait_without_waiting_it_out() -> None:
    clock = ManualClock()
    agents = {"napper": {"tools": ["durable_wait"]}}
    async with parley_app({}, agents=agents, clock=clock) as parley, parley.mcp() as client:
        started = await call(
            client, "start_session", agent="napper", message="/wait 3600 nap", wait_seconds=0
        )
        sid = started["session_id"]

        async def parked() -> bool:
            return _call_statuses(parley.directory / "parley.db") == [("durable_wait", "waiting_for_timer")]

        await eventually(parked, "the session to wait on its timer")
        parley.advance(3601)

        async def answered() -> bool:
            status: str = (await call(client, "get_session", session_id=sid))["status"]
            return status == "idle"

        await eventually(answered, "the timer to fire once the clock passed it")


async def test_an_armed_fault_point_runs_its_action_at_that_point_only() -> None:
    seen: list[tuple[str, str]] = []

    async def note(point: str, detail: str) -> None:
        seen.append((point, detail))

    faults = FaultPoints("model_committed", match="second", action=note)
    async with parley_app(faults=faults) as parley, parley.mcp() as client:
        first = await call(client, "start_session", agent="demo", message="first")
        await call(client, "send_message", session_id=first["session_id"], message="second")
    assert [point for point, _ in seen] == ["model_committed"]
    assert "second" in seen[0][1]


def _call_statuses(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as connection:
        return list(connection.execute("SELECT name, status FROM tool_calls ORDER BY call_index"))


async def test_two_parleys_in_one_test_each_log_only_their_own_work() -> None:
    async with parley_app() as first, parley_app() as second:
        async with (await second.http()).client() as http:
            created = await http.post("/v1/sessions", json={"agent": "demo", "message": "hi"})
        session_id = created.json()["session_id"]
        await eventually(lambda: _logged(second, session_id), "the second parley to log the session")
    assert session_id not in first.log(), "the first parley's log holds the second one's work"


async def _logged(parley: ParleyUnderTest, text: str) -> bool:
    return text in parley.log()


async def test_a_held_model_keeps_a_turn_running_until_the_test_releases_it(tmp_path: Path) -> None:
    model = HeldModel()
    held = model.hold("wait for me")
    async with parley_app(directory=tmp_path, model=model) as parley, parley.mcp() as client:
        other = await call(client, "start_session", agent="demo", message="not held")
        assert other["status"] == "answered", "only calls for the chosen word are held"
        started = await call(client, "start_session", agent="demo", message="wait for me", wait_seconds=0)
        await held.wait_held()
        sid = started["session_id"]
        assert (await call(client, "get_session", session_id=sid))["status"] == "running"
        held.release()
        done = await call(client, "get_session", session_id=sid, wait_seconds=DEADLINE_S)
    assert done["last_turn"]["answer"] == "You said: wait for me (message 1 of this session)"
    assert held.calls == 1
