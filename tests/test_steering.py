"""Turn control: steering, the queue, and cancels that name their turn; limits and model retries.
parley runs in the test's process, and so does the fixture MCP server of the `limited` agents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any

import anyio
import pytest

from parley.testing import HeldModel, Hold
from tests.support import (
    FIXTURE_LOG,
    STATE_WINDOW_S,
    TEST_DEADLINE_S,
    Gate,
    InProcessServer,
    Served,
    call,
    call_error,
    db_rows,
    eventually,
    fixture_in_process,
    serving,
    write_config,
)

pytestmark = pytest.mark.anyio

# The wall-time limit of the agent "brief": its first model call must start inside it (the
# session starts and makes its first call in this process, well within a third of the window).
WALL_LIMIT_S = STATE_WINDOW_S / 3


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    # The model holds a call the test steers or cancels around until the test releases it.
    async with serving(write_config(tmp_path_factory.mktemp("steer")), model=HeldModel()) as served:
        yield served


def _hold(served: Served, word: str) -> Hold:
    """Hold the model calls for messages containing `word` until the test releases them."""
    server = served.server
    assert isinstance(server, InProcessServer) and isinstance(server.model, HeldModel)
    return server.model.hold(word)


async def _steer_recorded(served: Served, sid: str) -> None:
    async def recorded() -> bool:
        rows = db_rows(
            served.db, "SELECT COUNT(*) FROM queued_messages WHERE session_id = ? AND steer = 1", (sid,)
        )
        return rows == [(1,)]

    await eventually(recorded, "the server to record the steer")


async def _in_model_call(served: Served, sid: str) -> None:
    async def check() -> bool:
        return db_rows(served.db, "SELECT phase FROM sessions WHERE id = ?", (sid,)) == [("model",)]

    await eventually(check, "the turn to be in its model call")


async def test_a_steer_ends_the_running_turn_after_its_step_and_answers_next(served: Served) -> None:
    # The model call the test steers still runs when the steer arrives: it is held until then.
    held = _hold(served, "slow one")
    first = await call(served.client, "start_session", agent="demo", message="slow one", wait_seconds=0)
    sid = first["session_id"]
    queued = await call(served.client, "send_message", session_id=sid, message="queued one", wait_seconds=0)
    await _in_model_call(served, sid)
    await held.wait_held()
    outcome: list[dict[str, Any]] = []

    async def steer() -> None:
        outcome.append(
            await call(served.client, "send_message", session_id=sid, message="change of plan", steer=True)
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(steer)
        await _steer_recorded(served, sid)
        held.release()
    [steered] = outcome
    assert steered["status"] == "answered"
    assert steered["answer"] == "You said: change of plan (message 2 of this session)"
    snapshot = await call(
        served.client, "get_session", session_id=sid, messages_from=1, wait_seconds=TEST_DEADLINE_S
    )
    # The step in progress finished (its answer is kept), the turn ended there, the steer went first.
    texts = [m["text"] for m in snapshot["messages"]]
    assert texts[:4] == [
        "slow one",
        "You said: slow one (message 1 of this session)",
        "change of plan",
        "You said: change of plan (message 2 of this session)",
    ]
    assert texts[4] == "queued one", "the queued message still runs, after the steer"
    turns = db_rows(served.db, "SELECT status, error FROM turns WHERE session_id = ? ORDER BY seq", (sid,))
    assert turns[0][0] == "cancelled" and "Steered" in turns[0][1]
    assert queued["status"] == "running"


async def test_a_queued_message_can_be_deleted_or_promoted_to_a_steer(served: Served) -> None:
    # The first turn waits on a question, so the messages below queue behind it however slow we are.
    first = await call(served.client, "start_session", agent="demo", message="/ask Busy? | yes | no")
    assert first["status"] == "waiting_for_input", first
    sid = first["session_id"]
    drop = await call(served.client, "send_message", session_id=sid, message="never mind", wait_seconds=0)
    keep = await call(served.client, "send_message", session_id=sid, message="urgent", wait_seconds=0)
    snapshot = await call(served.client, "get_session", session_id=sid)
    ids = {q["message"]: q["id"] for q in snapshot["queued_messages"]}
    assert ids["never mind"] == drop["queued_message_id"]
    deleted = await call(
        served.client, "delete_queued_message", session_id=sid, queued_message_id=ids["never mind"]
    )
    assert deleted["status"] == "deleted"
    again = await call(
        served.client, "delete_queued_message", session_id=sid, queued_message_id=ids["never mind"]
    )
    assert again["status"] == "already deleted"
    promoted = await call(
        served.client, "send_message", session_id=sid, steer=True, queued_message_id=keep["queued_message_id"]
    )
    assert promoted["answer"] == "You said: urgent (message 2 of this session)"
    snapshot = await call(
        served.client, "get_session", session_id=sid, messages_from=1, wait_seconds=TEST_DEADLINE_S
    )
    assert "never mind" not in [m["text"] for m in snapshot["messages"]]
    text = await call_error(
        served.client, "delete_queued_message", session_id=sid, queued_message_id=keep["queued_message_id"]
    )
    assert "already taken into turn" in text


async def test_steering_withdraws_a_pending_question(served: Served) -> None:
    asked = await call(
        served.client, "start_session", agent="demo", message="/ask Which colour? | red | blue"
    )
    assert asked["status"] == "waiting_for_input"
    sid, iid = asked["session_id"], asked["pending"][0]["id"]
    steered = await call(served.client, "send_message", session_id=sid, message="forget it", steer=True)
    assert steered["answer"] == "You said: forget it (message 2 of this session)"
    text = await call_error(served.client, "answer_question", session_id=sid, interrupt_id=iid, answer="red")
    assert "no longer pending" in text


async def test_a_cancel_naming_an_older_turn_changes_nothing(served: Served) -> None:
    first = await call(served.client, "start_session", agent="demo", message="done")
    sid = first["session_id"]
    held = _hold(served, "second of two")
    running = await call(
        served.client, "send_message", session_id=sid, message="second of two", wait_seconds=0
    )
    await held.wait_held()
    stale = await call(served.client, "cancel_turn", session_id=sid, turn_id=first["turn_id"], wait_seconds=0)
    assert stale["turn_id"] == first["turn_id"] and stale["status"] == "answered"
    assert any("nothing was cancelled" in n for n in stale["notes"])
    held.release()
    snapshot = await call(served.client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    assert snapshot["last_turn"]["status"] == "answered"
    assert snapshot["last_turn"]["answer"] == "You said: second of two (message 2 of this session)"
    assert running["status"] == "running"
    again = await call(served.client, "cancel_turn", session_id=sid)
    assert any("Nothing was running" in n for n in again["notes"])


@pytest.fixture(scope="module")
async def limited(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    directory = tmp_path_factory.mktemp("limits")
    agents: dict[str, dict[str, Any]] = {
        "frugal": {"limits": {"max_session_tokens": 300}},
        "frugal_task": {"kinds": ["task"], "limits": {"max_session_tokens": 300}},
        "brief": {"limits": {"max_session_seconds": WALL_LIMIT_S}},
        "short": {"limits": {"max_turns": 2}},
        "worker": {"mcp_servers": ["fixture"]},
    }
    runtime = {"model_retry_backoff_s": 0.05, "max_model_attempts": 3}
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_config(directory, agents=agents, runtime=runtime, mcp_servers={"fixture": fixture})
        async with serving(config) as served:
            yield served


async def _tool_running(served: Served, sid: str) -> None:
    async def running() -> bool:
        return db_rows(served.db, "SELECT status FROM tool_calls WHERE session_id = ?", (sid,)) == [
            ("running",)
        ]

    await eventually(running, "the tool call to start")


async def _while_the_gate_is_shut(
    served: Served, sid: str, gate: Gate, request: Awaitable[dict[str, Any]], recorded_sql: str
) -> dict[str, Any]:
    """Send `request` while the gated tool call runs; open the gate once the server has recorded
    it (`recorded_sql` on the session id reads true); return the request's outcome."""
    outcome: list[dict[str, Any]] = []

    async def send() -> None:
        outcome.append(await request)

    async def recorded() -> bool:
        return bool(db_rows(served.db, recorded_sql, (sid,))[0][0])

    async with anyio.create_task_group() as tg:
        tg.start_soon(send)
        await eventually(recorded, "the server to record the request while the tool runs")
        gate.open()
    return outcome[0]


async def test_transient_model_failures_are_retried_as_attempts_of_the_step(limited: Served) -> None:
    outcome = await call(limited.client, "start_session", agent="demo", message="/fail 2\nthird time lucky")
    assert outcome["status"] == "answered"
    assert outcome["answer"] == "You said: third time lucky (message 1 of this session)"
    retries = db_rows(
        limited.db,
        "SELECT COUNT(*) FROM events WHERE session_id = ? AND kind = 'model_retry'",
        (outcome["session_id"],),
    )
    assert retries == [(2,)]


async def test_a_model_call_that_keeps_failing_fails_the_turn_and_the_next_message_works(
    limited: Served,
) -> None:
    failed = await call(limited.client, "start_session", agent="demo", message="/fail forever\ndoomed")
    assert failed["status"] == "failed"
    assert "gave up after 3 attempts" in failed["error"]
    sid = failed["session_id"]
    snapshot = await call(limited.client, "get_session", session_id=sid)
    assert snapshot["status"] == "idle" and "gave up" in snapshot["last_error"]
    assert [m["text"] for m in snapshot["messages"]] == ["/fail forever\ndoomed"], "the user message stays"
    ok = await call(limited.client, "send_message", session_id=sid, message="again")
    assert ok["answer"] == "You said: again (message 2 of this session)"


async def test_a_token_limit_closes_a_chat_session_and_fails_a_task_session(limited: Served) -> None:
    first = await call(limited.client, "start_session", agent="frugal", message="x" * 1200)
    assert first["status"] == "answered"
    sid = first["session_id"]
    second = await call(limited.client, "send_message", session_id=sid, message="more")
    assert second["status"] == "failed" and "limit is 300" in second["error"]
    snapshot = await call(limited.client, "get_session", session_id=sid)
    assert snapshot["status"] == "closed" and "limit is 300" in snapshot["closed_reason"]
    text = await call_error(limited.client, "send_message", session_id=sid, message="still?")
    assert "closed" in text

    task = await call(limited.client, "start_session", agent="frugal_task", message="y" * 1200)
    assert task["status"] == "failed"
    assert (await call(limited.client, "get_session", session_id=task["session_id"]))["status"] == "failed"


async def test_a_wall_time_limit_closes_the_session_with_its_reason(limited: Served) -> None:
    # The first model call starts inside the limit and ends past it (it sleeps longer than the limit).
    slow = f"/sleep {WALL_LIMIT_S + 0.2:g}\nslow"
    first = await call(limited.client, "start_session", agent="brief", message=slow)
    sid = first["session_id"]
    assert first["status"] == "answered", "the limit is checked before a model call, not during one"
    late = await call(limited.client, "send_message", session_id=sid, message="too late")
    assert late["status"] == "failed" and f"wall-time limit of {WALL_LIMIT_S:g}s" in late["error"]
    snapshot = await call(limited.client, "get_session", session_id=sid)
    assert snapshot["status"] == "closed"


async def test_cancel_during_a_tool_call_keeps_its_result_and_the_session_goes_on(limited: Served) -> None:
    gate = Gate(limited.directory / "gate-cancel")
    started = await call(
        limited.client, "start_session", agent="worker", message=gate.tool_line(), wait_seconds=0
    )
    sid = started["session_id"]
    await _tool_running(limited, sid)
    cancelled = await _while_the_gate_is_shut(
        limited,
        sid,
        gate,
        call(limited.client, "cancel_turn", session_id=sid),
        "SELECT cancel_requested_turn IS NOT NULL FROM sessions WHERE id = ?",
    )
    assert cancelled["status"] == "cancelled"
    [tool_call] = cancelled["tool_calls"]
    assert tool_call["status"] == "succeeded" and gate.passed in tool_call["result"], (
        "a started call finishes"
    )
    after = await call(limited.client, "send_message", session_id=sid, message="next")
    assert after["answer"] == "You said: next (message 2 of this session)"


async def test_the_turn_limit_closes_the_session_with_its_reason(limited: Served) -> None:
    first = await call(limited.client, "start_session", agent="short", message="one")
    sid = first["session_id"]
    second = await call(limited.client, "send_message", session_id=sid, message="two")
    assert second["status"] == "answered" and second["session_status"] == "closed"
    snapshot = await call(limited.client, "get_session", session_id=sid)
    assert snapshot["status"] == "closed" and "limit of 2 turns" in snapshot["closed_reason"]
    text = await call_error(limited.client, "send_message", session_id=sid, message="three")
    assert "limit of 2 turns" in text


async def test_steering_while_a_slow_tool_runs_keeps_its_result(limited: Served) -> None:
    gate = Gate(limited.directory / "gate-steer")
    started = await call(
        limited.client, "start_session", agent="worker", message=gate.tool_line(), wait_seconds=0
    )
    sid = started["session_id"]
    await _tool_running(limited, sid)
    steered = await _while_the_gate_is_shut(
        limited,
        sid,
        gate,
        call(limited.client, "send_message", session_id=sid, message="new direction", steer=True),
        "SELECT COUNT(*) > 0 FROM queued_messages WHERE session_id = ? AND steer = 1",
    )
    assert steered["answer"] == "You said: new direction (message 2 of this session)"
    calls = db_rows(limited.db, "SELECT status, result FROM tool_calls WHERE session_id = ?", (sid,))
    assert calls[0][0] == "succeeded" and gate.passed in calls[0][1], "the started tool finished"


async def test_steering_while_an_approval_is_pending_withdraws_it(limited: Served) -> None:
    parked = await call(
        limited.client, "start_session", agent="worker", message='/tool fixture__bare {"text": "x"}'
    )
    assert parked["status"] == "waiting_for_input"
    sid, iid = parked["session_id"], parked["pending"][0]["id"]
    steered = await call(limited.client, "send_message", session_id=sid, message="skip that", steer=True)
    assert steered["status"] == "answered"
    text = await call_error(
        limited.client, "approve", session_id=sid, decisions=[{"interrupt_id": iid, "approved": True}]
    )
    assert "no longer pending" in text
    statuses = db_rows(
        limited.db, "SELECT status FROM tool_calls WHERE session_id = ? AND tool = 'bare'", (sid,)
    )
    assert statuses == [("cancelled",)]


async def test_settings_can_lower_a_sessions_limits_but_not_raise_them(limited: Served) -> None:
    first = await call(
        limited.client, "start_session", agent="demo", message="one", settings={"limits": {"max_turns": 2}}
    )
    sid = first["session_id"]
    second = await call(limited.client, "send_message", session_id=sid, message="two")
    assert second["session_status"] == "closed"
    snapshot = await call(limited.client, "get_session", session_id=sid)
    assert "limit of 2 turns" in snapshot["closed_reason"]
    text = await call_error(
        limited.client, "start_session", agent="demo", message="x", settings={"limits": {"max_turns": 5000}}
    )
    assert "'settings.limits.max_turns'" in text and "at most 1000" in text
    text = await call_error(
        limited.client, "start_session", agent="demo", message="x", settings={"limits": {"temperature": 1}}
    )
    assert "'settings.limits.temperature'" in text
