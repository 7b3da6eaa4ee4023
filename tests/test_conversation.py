"""A conversation with the demo agent, in both protocol generations, with parley in the test's
process (the composition root of `parley serve`): clients bound in memory, or over HTTP on a
loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.support import (
    TEST_DEADLINE_S,
    TRANSPORTS,
    call,
    call_error,
    eventually,
    running_server,
    write_config,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=TRANSPORTS, ids=["-".join(t) for t in TRANSPORTS])
async def client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    config = write_config(tmp_path_factory.mktemp("conv"))
    async with running_server(config, mode=request.param[1], http=request.param[0] == "http") as (_, client):
        yield client


async def test_list_agents_shows_demo(client: Client) -> None:
    agents = await call(client, "list_agents")
    names = [a["name"] for a in agents["agents"]]
    assert "demo" in names


async def test_conversation_keeps_history(client: Client) -> None:
    first = await call(client, "start_session", agent="demo", message="hello there")
    assert first["status"] == "answered"
    assert first["answer"] == "You said: hello there (message 1 of this session)"
    sid = first["session_id"]
    second = await call(client, "send_message", session_id=sid, message="and again")
    assert second["status"] == "answered"
    assert second["answer"] == "You said: and again (message 2 of this session)"
    assert second["session_id"] == sid
    snapshot = await call(client, "get_session", session_id=sid)
    assert [m["text"] for m in snapshot["messages"] if m["role"] == "user"] == ["hello there", "and again"]
    assert snapshot["usage"]["model_calls"] == 2
    assert snapshot["usage"]["input_tokens"] > 0


async def test_message_sent_while_a_turn_runs_is_answered_in_its_own_next_turn(client: Client) -> None:
    # The first turn waits on a question until the test answers it, so "second" arrives while it runs.
    asking = "/ask Ready? | yes | no\nfirst"
    first = await call(client, "start_session", agent="demo", message=asking, wait_seconds=0)
    assert first["status"] == "running"
    sid = first["session_id"]
    outcomes: list[dict[str, Any]] = []

    async def send_second() -> None:
        outcomes.append(await call(client, "send_message", session_id=sid, message="second"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(send_second)
        waiting: dict[str, Any] = {}

        async def second_queued_behind_the_question() -> bool:
            waiting.update(await call(client, "get_session", session_id=sid))
            queued = [q["message"] for q in waiting["queued_messages"]]
            return queued == ["second"] and bool(waiting["pending"])

        await eventually(second_queued_behind_the_question, "'second' to queue behind the question")
        await call(
            client, "answer_question", session_id=sid, interrupt_id=waiting["pending"][0]["id"], answer="yes"
        )
    [second] = outcomes
    assert second["status"] == "answered"
    assert second["answer"] == "You said: second (message 2 of this session)"
    assert second["turn_id"] != first["turn_id"]
    snapshot = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    texts = [(m["role"], m["text"]) for m in snapshot["messages"]]
    assert texts == [
        ("user", asking),
        ("assistant", "Calling ask_user."),
        ("tool", "The user answered: yes"),
        (
            "assistant",
            "You said: first (message 1 of this session)\n\nTool results:\n1. ask_user (ok): The user answered: yes",
        ),
        ("user", "second"),
        ("assistant", "You said: second (message 2 of this session)"),
    ]
    assert snapshot["status"] == "idle"
    assert snapshot["turn_count"] == 2


async def test_short_wait_returns_running_and_get_session_keeps_waiting(client: Client) -> None:
    started = await call(client, "start_session", agent="demo", message="/sleep 1\nslow", wait_seconds=0.2)
    assert started["status"] == "running"
    sid = started["session_id"]
    snapshot = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    assert snapshot["status"] == "idle"
    assert snapshot["last_turn"]["status"] == "answered"
    assert snapshot["last_turn"]["answer"] == "You said: slow (message 1 of this session)"


async def test_tool_call_turn_runs_the_built_in_tool_and_quotes_its_result(client: Client) -> None:
    message = (
        '/tool write_todos {"todos": [{"content": "draft", "status": "completed"}, {"content": "ship"}]}'
    )
    outcome = await call(client, "start_session", agent="demo", message=message)
    assert outcome["status"] == "answered"
    assert [c["tool"] for c in outcome["tool_calls"]] == ["write_todos"]
    assert outcome["tool_calls"][0]["status"] == "succeeded"
    assert "Plan saved: 2 item(s), 1 completed." in outcome["answer"]
    snapshot = await call(client, "get_session", session_id=outcome["session_id"])
    assert snapshot["todos"] == [
        {"content": "draft", "status": "completed"},
        {"content": "ship", "status": "pending"},
    ]


async def test_unknown_tool_is_a_tool_error_the_model_sees(client: Client) -> None:
    outcome = await call(client, "start_session", agent="demo", message="/tool rm_rf {}")
    assert outcome["status"] == "answered"
    assert outcome["tool_calls"][0]["status"] == "failed"
    assert outcome["tool_calls"][0]["is_error"] is True
    assert "Unknown tool 'rm_rf'" in outcome["answer"]


async def test_cancel_turn_stops_a_sleeping_turn_and_the_session_takes_the_next_message(
    client: Client,
) -> None:
    started = await call(client, "start_session", agent="demo", message="/sleep 3600\nnever", wait_seconds=0)
    sid = started["session_id"]
    cancelled = await call(client, "cancel_turn", session_id=sid)
    assert cancelled["status"] == "cancelled"
    again = await call(client, "cancel_turn", session_id=sid)
    assert again["status"] == "cancelled"
    assert again["turn_id"] == cancelled["turn_id"]
    after = await call(client, "send_message", session_id=sid, message="still there?")
    assert after["answer"] == "You said: still there? (message 2 of this session)"


async def test_closed_session_stays_readable_and_refuses_messages(client: Client) -> None:
    started = await call(client, "start_session", agent="demo", message="bye")
    sid = started["session_id"]
    closed = await call(client, "close_session", session_id=sid)
    assert closed["status"] == "closed"
    text = await call_error(client, "send_message", session_id=sid, message="hello?")
    assert "closed" in text and sid in text
    snapshot = await call(client, "get_session", session_id=sid)
    assert snapshot["status"] == "closed"
    assert snapshot["total_messages"] == 2


async def test_close_cancels_the_running_turn_and_drops_queued_messages(client: Client) -> None:
    started = await call(client, "start_session", agent="demo", message="/sleep 3600\nlong", wait_seconds=0)
    sid = started["session_id"]
    queued = await call(client, "send_message", session_id=sid, message="queued", wait_seconds=0)
    assert queued["status"] == "running"
    closed = await call(client, "close_session", session_id=sid)
    assert closed["status"] == "closed"
    snapshot = await call(client, "get_session", session_id=sid)
    assert snapshot["last_turn"]["status"] == "cancelled"
    assert snapshot["queued_messages"] == []
    assert [m["text"] for m in snapshot["messages"]] == ["/sleep 3600\nlong"]


async def test_list_sessions_pages_through_the_callers_sessions(client: Client) -> None:
    ids = [(await call(client, "start_session", agent="demo"))["session_id"] for _ in range(3)]
    seen: list[str] = []
    cursor = None
    while True:
        args = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = await call(client, "list_sessions", **args)
        seen += [s["session_id"] for s in page["sessions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert set(ids) <= set(seen)
    assert len(seen) == len(set(seen))
    idle = await call(client, "list_sessions", status="closed", limit=100)
    assert all(s["status"] == "closed" for s in idle["sessions"])
