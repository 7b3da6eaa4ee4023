"""Per-session settings that narrow what an agent does: settings.enabled_tools (a subset of the
agent's tools, never wider), on the service (what a caller may ask) and on the driver (what the
model is offered, and what a call outside the set gets), with a scripted model and a SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.config import (
    AgentConfig,
    AgentLimits,
    CompactionConfig,
    Memory,
    MemoryConfig,
    ModelSpec,
    effective_limits,
    effective_memory,
)
from parley.core.ids import SessionId
from parley.errors import InvalidArgument
from parley.runtime.access import LOCAL_PRINCIPAL
from parley.runtime.builtin_tools import ASK_USER
from parley.runtime.model import ModelResponse, RequestedCall, ToolSpec
from parley.runtime.offer import Binding, Offer
from parley.runtime.service import SendRequest, SessionQuery, SessionService, StartRequest
from parley.storage.ports import Store
from parley.testing.model import ScriptedModelClient
from tests.driver_support import NO_WAIT, service, started_session
from tests.driver_support import drive as drive_once
from tests.support import open_test_store

pytestmark = pytest.mark.anyio

HELPER = AgentConfig(
    name="helper",
    instructions="Help.",
    model=ModelSpec(provider="scripted", name="script-1"),
    tools=["write_todos", "ask_user", "durable_wait"],
    kinds=["chat", "task"],
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_test_store(tmp_path / "parley.db") as opened:
        yield opened


def helper_service(store: Store, agent: AgentConfig = HELPER) -> SessionService:
    return service(store, {agent.name: agent})


async def session_with(store: Store, settings: dict[str, Any], text: str) -> SessionId:
    """A session of HELPER with `settings` and its first message queued."""
    return await started_session(store, HELPER.name, text, settings=settings)


async def drive(
    store: Store, model: ScriptedModelClient, sid: SessionId, agent: AgentConfig = HELPER
) -> None:
    await drive_once(store, {agent.name: agent}, model, sid)


# ---------------------------------------------------------------------------- enabled_tools


def test_an_offer_narrowed_keeps_only_the_names_it_has_and_set_result() -> None:
    offer = Offer()
    for name in ("write_todos", "ask_user", "set_result", "time__now"):
        offer.tools.append(ToolSpec(name=name, description=name, input_schema={"type": "object"}))
        offer.bindings[name] = Binding(name=name, source="builtin", effect="read")
    offer.unavailable = {"files": "down", "time": "slow"}
    narrowed = offer.narrowed(["ask_user", "teleport", "files__read"])
    assert [t.name for t in narrowed.tools] == ["ask_user", "set_result"]
    assert list(narrowed.bindings) == ["ask_user", "set_result"]
    assert narrowed.unavailable == {"files": "down"}
    assert offer.narrowed(None) is offer


async def test_enabled_tools_narrows_what_the_model_is_offered_and_a_call_outside_it_is_a_tool_error(
    store: Store,
) -> None:
    model = ScriptedModelClient(
        [
            ModelResponse(
                text="Planning.",
                tool_calls=(RequestedCall(name="write_todos", arguments={"todos": [{"content": "x"}]}),),
            ),
            ModelResponse(text="I may only ask."),
        ]
    )
    sid = await session_with(store, {"enabled_tools": ["ask_user"]}, "plan it")
    await drive(store, model, sid)
    model.assert_complete()
    assert [r.tools for r in model.requests] == [(ASK_USER,), (ASK_USER,)]
    result = model.requests[1].messages[-1]
    assert (result.role, result.tool_name, result.is_error) == ("tool", "write_todos", True)
    assert "Unknown tool 'write_todos'" in result.text and "ask_user" in result.text
    session = await store.get_session(sid)
    assert session is not None and session.todos == []  # the call outside the set never ran


async def test_enabled_tools_null_gives_the_agent_all_of_its_tools_again(store: Store) -> None:
    model = ScriptedModelClient([ModelResponse(text="ok")])
    sid = await session_with(store, {"enabled_tools": None}, "hello")
    await drive(store, model, sid)
    assert {t.name for t in model.requests[0].tools} == {"write_todos", "ask_user", "durable_wait"}


async def test_a_caller_may_narrow_the_tools_but_never_widen_them(store: Store) -> None:
    parley = helper_service(store)
    out = await parley.messages.start_session(
        LOCAL_PRINCIPAL, StartRequest(agent="helper", settings={"enabled_tools": ["ask_user"]}), NO_WAIT
    )
    details = await parley.reads.get_session(LOCAL_PRINCIPAL, out.session_id)
    assert details.tools == ["ask_user"]
    task = await parley.messages.start_session(
        LOCAL_PRINCIPAL, StartRequest(agent="helper", kind="task", settings={"enabled_tools": []}), NO_WAIT
    )
    details = await parley.reads.get_session(LOCAL_PRINCIPAL, task.session_id)
    assert details.tools == ["set_result"]  # a task session can always hand in its result
    for enabled, problem in [
        (["ask_user", "bash"], "bash: not a tool of agent 'helper'"),
        (["time__now"], "time__now: not a tool of agent 'helper'"),
        ("ask_user", "must be a list of tool names"),
        ([1], "must be a list of tool names"),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            await parley.messages.send_message(
                LOCAL_PRINCIPAL,
                SendRequest(session_id=out.session_id, message="hi", settings={"enabled_tools": enabled}),
                NO_WAIT,
            )
        assert refused.value.field == "settings.enabled_tools" and problem in str(refused.value)
    with pytest.raises(InvalidArgument) as refused:
        await parley.messages.start_session(
            LOCAL_PRINCIPAL,
            StartRequest(agent="helper", message="hi", settings={"enabled_tools": ["Read"]}),
            NO_WAIT,
        )
    assert "choose among: write_todos, ask_user, durable_wait" in str(refused.value)


# ---------------------------------------------------------------------------- memory modes


def with_memory(**memory: Any) -> AgentConfig:
    return HELPER.model_copy(update={"memory": MemoryConfig(**memory)})


async def converse(
    store: Store, agent: AgentConfig, texts: list[str], settings: dict[str, Any] | None = None
) -> list[list[tuple[str, str]]]:
    """Send `texts` one turn after another in a new session (the first turn also calls
    write_todos); return what the model was shown on each call, as (role, text) pairs."""
    model = ScriptedModelClient()
    todo = RequestedCall(name="write_todos", arguments={"todos": [{"content": "x"}]})
    model.add(ModelResponse(text="calling", tool_calls=(todo,)), ModelResponse(text="a1"))
    sid = await session_with(store, settings or {}, texts[0])
    await drive(store, model, sid, agent)
    parley = helper_service(store, agent)
    for i, text in enumerate(texts[1:], start=2):
        model.add(ModelResponse(text=f"a{i}"))
        await parley.messages.send_message(
            LOCAL_PRINCIPAL, SendRequest(session_id=sid, message=text), NO_WAIT
        )
        await drive(store, model, sid, agent)
    model.assert_complete()
    return [[(m.role, m.text) for m in r.messages] for r in model.requests]


FIRST_TURN = [("user", "u1"), ("assistant", "calling"), ("tool", "Plan saved: 1 item(s), 0 completed.")]


async def test_full_memory_shows_the_whole_conversation(store: Store) -> None:
    seen = await converse(store, HELPER, ["u1", "u2", "u3"])
    assert seen[-1] == [*FIRST_TURN, ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"), ("user", "u3")]


async def test_no_memory_shows_each_turn_only_its_own_messages(store: Store) -> None:
    seen = await converse(store, with_memory(mode="none"), ["u1", "u2", "u3"])
    assert seen == [FIRST_TURN[:1], FIRST_TURN, [("user", "u2")], [("user", "u3")]]


async def test_a_window_shows_the_latest_messages_from_a_user_message_and_never_splits_a_call(
    store: Store,
) -> None:
    seen = await converse(store, with_memory(mode="window", messages=2), ["u1", "u2", "u3"])
    # The last two of u1, calling, result hold no user message: the window reaches back to the one
    # that began the exchange, so the result comes with its call.
    assert seen[1] == FIRST_TURN
    # The last two of ..., a1, u2 would begin with the assistant: the window starts at u2.
    assert seen[2] == [("user", "u2")]
    seen = await converse(store, with_memory(mode="window", messages=3), ["u1", "u2", "u3"])
    assert seen[3] == [("user", "u2"), ("assistant", "a2"), ("user", "u3")]


async def test_a_session_may_remember_less_than_its_agent(store: Store) -> None:
    seen = await converse(store, HELPER, ["u1", "u2"], {"memory": {"mode": "window", "messages": 2}})
    assert seen[2] == [("user", "u2")]
    [session] = (await store.list_sessions(None, None, None, None, 10)).sessions
    assert len(await store.list_messages(session.id, None, None)) == 6  # storage keeps it whole


async def test_a_session_may_not_remember_more_than_its_agent(store: Store) -> None:
    window = with_memory(mode="window", messages=5)
    parley = helper_service(store, window)
    assert await parley.messages.start_session(
        LOCAL_PRINCIPAL, StartRequest(agent="helper", settings={"memory": {"mode": "none"}}), NO_WAIT
    )
    for memory, field, problem in [
        ({"mode": "full"}, "settings.memory.mode", "would remember more than agent 'helper' does (window)"),
        ({"mode": "window", "messages": 6}, "settings.memory.messages", "at most 5"),
        ({"mode": "none", "messages": 2}, "settings.memory.messages", 'goes with "mode": "window"'),
        ({"mode": "all"}, "settings.memory.mode", "must be one of: none, window, compaction, full"),
        ({"size": 3}, "settings.memory", "must be an object"),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            await parley.messages.start_session(
                LOCAL_PRINCIPAL, StartRequest(agent="helper", settings={"memory": memory}), NO_WAIT
            )
        assert refused.value.field == field and problem in str(refused.value)


def test_compaction_enabled_means_the_compaction_mode() -> None:
    assert HELPER.resolved_memory == Memory("full", 20)
    legacy = HELPER.model_copy(update={"compaction": CompactionConfig(enabled=True)})
    assert legacy.resolved_memory.mode == "compaction"
    assert with_memory(mode="none").resolved_memory.mode == "none"


def test_settings_checked_against_an_earlier_version_never_widen_a_newer_one() -> None:
    # A session chose its memory and limits under one definition; its turn runs on a narrower one.
    chosen = {"memory": {"mode": "window", "messages": 50}, "limits": {"max_turns": 40}}
    narrower = with_memory(mode="window", messages=5).model_copy(update={"limits": AgentLimits(max_turns=10)})
    assert effective_memory(narrower, chosen) == Memory("window", 5)
    assert effective_memory(with_memory(mode="none"), chosen) == Memory("none", 20)
    assert effective_memory(HELPER, chosen) == Memory("window", 50)
    assert effective_limits(narrower.limits, chosen).max_turns == 10
    assert effective_limits(HELPER.limits, chosen).max_turns == 40


# ---------------------------------------------------------------------------- limits


async def test_a_limit_that_counts_takes_a_whole_number_and_a_finite_one(store: Store) -> None:
    parley = helper_service(store)
    for name, value, problem in [
        ("max_turns", 0.5, "must be a whole number"),
        ("max_model_calls_per_turn", 2.5, "must be a whole number"),
        ("max_session_tokens", 1e300, "must be a whole number"),
        ("max_session_seconds", float("inf"), "must be a positive number"),
        ("max_session_seconds", float("nan"), "must be a positive number"),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            await parley.messages.start_session(
                LOCAL_PRINCIPAL,
                StartRequest(agent="helper", message="hi", settings={"limits": {name: value}}),
                NO_WAIT,
            )
        assert refused.value.field == f"settings.limits.{name}" and problem in str(refused.value), value
    assert await parley.reads.list_sessions(LOCAL_PRINCIPAL, SessionQuery(limit=10)) == ([], None)
    # Whole numbers (also written 3.0, as some JSON encoders do) and seconds with a fraction pass.
    out = await parley.messages.start_session(
        LOCAL_PRINCIPAL,
        StartRequest(agent="helper", settings={"limits": {"max_turns": 3.0, "max_session_seconds": 1.5}}),
        NO_WAIT,
    )
    details = await parley.reads.get_session(LOCAL_PRINCIPAL, out.session_id)
    assert details.session.settings["limits"] == {"max_turns": 3, "max_session_seconds": 1.5}
