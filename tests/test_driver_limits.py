"""The session driver against a store (SQLite in a file) and a scripted model: limits and tool
errors."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from parley.config import AgentConfig, AgentLimits, ModelSpec
from parley.core.ids import SessionId, new_session_id
from parley.core.machine import model_call_limit_reason
from parley.core.records import QueuedMessageRecord, SessionRecord, TurnRecord, lease_holder
from parley.core.transitions import starting
from parley.errors import ModelError
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.builtin_tools import WRITE_TODOS
from parley.runtime.driver import DriveSettings, SessionDriver
from parley.runtime.model import ModelClient, ModelRequest, ModelResponse, RequestedCall
from parley.runtime.signals import SessionSignals
from parley.runtime.toolbox import Toolbox
from parley.storage.ports import Store
from parley.testing.model import ScriptedModelClient
from tests.store_support import list_steps, try_acquire_lease
from tests.support import TEST_DEADLINE_S, open_test_store

pytestmark = pytest.mark.anyio

PROC = "proc_driver_test"
LEASE_TTL_S = 30.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_test_store(tmp_path / "parley.db") as opened:
        yield opened


def agent(max_model_calls: int = 8) -> AgentConfig:
    return AgentConfig(
        name="planner",
        instructions="Plan things.",
        model=ModelSpec(provider="scripted", name="script-1"),
        tools=["write_todos"],
        limits=AgentLimits(max_model_calls_per_turn=max_model_calls),
    )


def driver(store: Store, planner: AgentConfig, model: ModelClient) -> SessionDriver:
    return SessionDriver(
        store=store,
        agents=AgentCatalog({planner.name: planner}, store),
        models=lambda spec: model,
        toolbox=Toolbox(None),
        signals=SessionSignals(),
        process_id=PROC,
        timings=DriveSettings(lease_ttl_s=LEASE_TTL_S, poll_interval_s=0.05),
        clock=time.time,
    )


async def session_with_message(store: Store, text: str, agent_name: str = "planner") -> SessionId:
    now = time.time()
    sid = new_session_id()
    record = SessionRecord.new(sid, agent=agent_name, owner="alice", kind="chat", now=now)
    first = QueuedMessageRecord.new(sid, text, now=now)
    await store.create_session(starting(record, first), first, now)
    return sid


async def drive(store: Store, planner: AgentConfig, model: ModelClient, sid: SessionId) -> None:
    lease = await try_acquire_lease(store, sid, PROC, time.time(), LEASE_TTL_S)
    assert lease is not None
    with anyio.fail_after(TEST_DEADLINE_S):
        await driver(store, planner, model).drive(sid, lease)


async def only_turn(store: Store, sid: SessionId) -> TurnRecord:
    [turn] = await store.list_turns(sid)
    return turn


def todos_call(*items: str) -> RequestedCall:
    return RequestedCall(name="write_todos", arguments={"todos": [{"content": item} for item in items]})


# ---------------------------------------------------------------------------- model-call limit


async def test_tools_asked_for_past_the_model_call_limit_end_the_turn_failed_without_running(
    store: Store,
) -> None:
    model = ScriptedModelClient(
        [
            ModelResponse(
                text="Planning.", tool_calls=(todos_call("first"),), input_tokens=11, output_tokens=3
            ),
            ModelResponse(
                text="Planning again.",
                tool_calls=(todos_call("second"), todos_call("third")),
                input_tokens=17,
                output_tokens=5,
            ),
        ]
    )
    sid = await session_with_message(store, "make a plan")

    await drive(store, agent(max_model_calls=2), model, sid)

    model.assert_complete()
    first_request, last_request = model.requests
    assert first_request.tools == (WRITE_TODOS,)
    assert last_request.tools == ()
    assert (first_request.model, first_request.instructions) == ("script-1", "Plan things.")
    assert [(m.role, m.tool_name, m.is_error) for m in last_request.messages] == [
        ("user", None, False),
        ("assistant", None, False),
        ("tool", "write_todos", False),
    ]

    turn = await only_turn(store, sid)
    limit_reason = model_call_limit_reason(2)
    assert (turn.status, turn.error, turn.answer) == ("failed", limit_reason, "Planning again.")
    assert (turn.model_calls, turn.input_tokens, turn.output_tokens) == (2, 28, 8)

    calls = await store.list_tool_calls(turn.id)
    assert [(c.step_no, c.status, c.attempts) for c in calls] == [
        (1, "succeeded", 1),
        (2, "cancelled", 0),
        (2, "cancelled", 0),
    ]
    assert [c.result for c in calls[1:]] == [None, None]
    tool_messages = [m for m in await store.list_messages(sid, None, None) if m.role == "tool"]
    assert [m.content["tool_call_id"] for m in tool_messages] == [calls[0].id]

    session = await store.get_session(sid)
    assert session is not None
    assert (session.status, session.current_turn_id, session.last_error) == ("idle", None, limit_reason)
    assert session.todos == [{"content": "first", "status": "pending"}]  # the cancelled calls never ran
    assert session.lease_owner is None


async def test_an_agent_allowed_one_model_call_is_never_offered_tools(store: Store) -> None:
    model = ScriptedModelClient([ModelResponse(text="Straight answer.")])
    sid = await session_with_message(store, "quick one")
    await drive(store, agent(max_model_calls=1), model, sid)
    model.assert_complete()
    assert model.requests[0].tools == ()
    turn = await only_turn(store, sid)
    assert (turn.status, turn.answer) == ("answered", "Straight answer.")


# ---------------------------------------------------------------------------- tool errors


async def test_an_unknown_tool_becomes_a_tool_error_the_model_sees_and_the_turn_still_answers(
    store: Store,
) -> None:
    model = ScriptedModelClient(
        [
            ModelResponse(
                text="Going.", tool_calls=(RequestedCall(name="teleport", arguments={"to": "mars"}),)
            ),
            ModelResponse(text="I cannot teleport; here is a plan instead."),
        ]
    )
    sid = await session_with_message(store, "go to mars")

    await drive(store, agent(), model, sid)

    model.assert_complete()
    second = model.requests[1]
    assert second.tools == (WRITE_TODOS,)
    result = second.messages[-1]
    assert (result.role, result.tool_name, result.is_error) == ("tool", "teleport", True)
    assert "Unknown tool 'teleport'" in result.text and "write_todos" in result.text
    assert result.tool_call_id == second.messages[-2].tool_calls[0].id

    turn = await only_turn(store, sid)
    assert (turn.status, turn.answer, turn.error) == (
        "answered",
        "I cannot teleport; here is a plan instead.",
        None,
    )
    [call] = await store.list_tool_calls(turn.id)
    assert (call.name, call.status, call.effect) == ("teleport", "failed", "unclassified")
    session = await store.get_session(sid)
    assert session is not None and (session.status, session.todos) == ("idle", [])


async def test_invalid_arguments_to_a_built_in_tool_come_back_as_a_tool_error(store: Store) -> None:
    model = ScriptedModelClient(
        [
            ModelResponse(
                text="Saving.", tool_calls=(RequestedCall(name="write_todos", arguments={"todo": []}),)
            ),
            ModelResponse(text="Fixed it."),
        ]
    )
    sid = await session_with_message(store, "plan")
    await drive(store, agent(), model, sid)
    model.assert_complete()
    result = model.requests[1].messages[-1]
    assert (result.role, result.is_error) == ("tool", True)
    assert "Invalid arguments for write_todos" in result.text
    turn = await only_turn(store, sid)
    assert (turn.status, turn.answer) == ("answered", "Fixed it.")


async def test_a_failed_model_call_fails_the_turn_with_its_message(store: Store) -> None:
    model = ScriptedModelClient([ModelError("provider is down")])
    sid = await session_with_message(store, "hello")
    await drive(store, agent(), model, sid)
    model.assert_complete()
    turn = await only_turn(store, sid)
    assert turn.status == "failed"
    assert turn.error is not None and "provider is down" in turn.error
    session = await store.get_session(sid)
    assert session is not None and session.status == "idle"


# ---------------------------------------------------------------------------- lease loss


class _LeaseThief:
    """A model call during which another process takes the session over."""

    def __init__(self, store: Store, session_id: SessionId) -> None:
        self._store = store
        self._session_id = session_id

    async def complete(self, request: ModelRequest) -> ModelResponse:
        # Far enough in the future that this process's lease has expired.
        assert await try_acquire_lease(self._store, self._session_id, "proc_thief", time.time() + 3600, 30)
        return ModelResponse(text="an answer nobody may commit")


async def test_a_driver_that_loses_its_lease_stops_quietly_and_commits_nothing(store: Store) -> None:
    sid = await session_with_message(store, "hello")
    await drive(store, agent(), _LeaseThief(store, sid), sid)
    session = await store.get_session(sid)
    assert session is not None and lease_holder(session.lease_owner) == "proc_thief"
    assert await list_steps(store, sid) == []
    assert [m.role for m in await store.list_messages(sid, None, None)] == ["user"]


# ---------------------------------------------------------------------------- the scripted model itself


async def test_the_scripted_model_replays_responses_in_order_and_records_requests() -> None:
    model = ScriptedModelClient([ModelResponse(text="one")])
    model.add(ModelResponse(text="two"))
    requests = [
        ModelRequest(model="m", instructions="", messages=(), tools=(), options={"n": n}) for n in (1, 2)
    ]
    assert [(await model.complete(r)).text for r in requests] == ["one", "two"]
    assert model.requests == requests
    assert model.remaining == 0
    model.assert_complete()


async def test_the_scripted_model_reports_unused_responses_and_calls_past_the_script() -> None:
    unused = ScriptedModelClient([ModelResponse(text="never asked")])
    with pytest.raises(AssertionError, match="never used"):
        unused.assert_complete()

    overrun = ScriptedModelClient()
    request = ModelRequest(model="m", instructions="", messages=(), tools=())
    with pytest.raises(ModelError, match="no response left"):
        await overrun.complete(request)
    with pytest.raises(AssertionError, match="after the script ran out"):
        overrun.assert_complete()
