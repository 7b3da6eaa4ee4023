"""Replays of what a session waited on: a person's decision, a question, a timer, a downstream
MCP task. A recorded rejection is replayed as a rejection, a question the original never asked
is declined with a note the model reads, a durable wait completes at once, and a downstream task
follows its tool's class (a configured read runs as a task again; a write gets the recorded
result). In-process, through the MCP tools (tests/test_replay.py has the replay's basics)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from parley.core.replays import NEW_QUESTION, WAITED
from parley.testing import (
    ManualClock,
    ScriptedModel,
    ToolServer,
    call,
    calls_tool,
    eventually,
    parley_app,
    reply,
    write_config,
)
from tests.support import db_rows
from tests.test_replay import tool_results

pytestmark = pytest.mark.anyio


async def settled(client: Client, sid: str) -> dict[str, Any]:
    """The session once it rests with nothing queued (a replay's turns all ran)."""
    found: dict[str, Any] = {}

    async def idle() -> bool:
        found.update(await call(client, "get_session", session_id=sid, messages_from=1, messages_limit=200))
        return found["status"] == "idle" and not found["queued_messages"]

    await eventually(idle, f"session {sid} to rest")
    return found


def call_rows(db: Path, sid: str) -> list[tuple[str, str]]:
    """A session's tool calls as stored: (name, status), in order."""
    sql = "SELECT name, status FROM tool_calls WHERE session_id = ? ORDER BY created_at, call_index"
    return [(str(name), str(status)) for name, status in db_rows(db, sql, (sid,))]


async def test_a_recorded_rejection_is_replayed_as_a_rejection_and_the_write_never_runs(
    tmp_path: Path,
) -> None:
    shop = ToolServer("shop")

    @shop.tool()
    async def charge(cents: int) -> str:
        """Take money (a write that needs a person's approval)."""
        return f"charged {cents} cents"

    agents = {"worker": {"mcp_servers": ["shop"]}}
    async with shop.serve():
        config = {"mcp_servers": {"shop": {**shop.entry, "tools": {"charge": {"approval": "always"}}}}}
        async with parley_app(config, agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
            parked = await call(
                client, "start_session", agent="worker", message='/tool shop__charge {"cents": 500}'
            )
            sid = parked["session_id"]
            [approval] = parked["pending"]
            decision = {"interrupt_id": approval["id"], "approved": False, "reason": "not on Fridays"}
            rejected = await call(client, "approve", session_id=sid, decisions=[decision])
            assert rejected["status"] == "answered", rejected

            started = await call(client, "replay_session", session_id=sid)
            replay = await settled(client, started["session_id"])
            inbox = await call(client, "list_pending")
            original = await call(client, "get_session", session_id=sid, messages_from=1, messages_limit=200)

    assert shop.ran("charge") == [], "neither the original nor its replay charged anything"
    assert call_rows(tmp_path / "parley.db", replay["session_id"]) == [("shop__charge", "rejected")]
    recorded = tool_results(original)["shop__charge"]["text"]
    assert recorded.startswith("A person declined this call: not on Fridays"), recorded
    assert tool_results(replay)["shop__charge"]["text"] == recorded, "the recorded rejection stands in"
    assert replay["pending"] == [] and inbox["pending"] == [], "the replay asked nobody again"
    assert replay["last_turn"]["status"] == "answered"
    assert "A person declined this call: not on Fridays" in replay["last_turn"]["answer"]


async def test_a_question_the_original_never_asked_is_declined_with_a_note_and_the_replay_goes_on(
    tmp_path: Path,
) -> None:
    """The candidate asks where the original answered: the replay does not park on a question
    nobody will answer; the model reads that it was declined, and answers."""
    model = ScriptedModel(
        [
            reply("Hello there."),  # the original's only turn
            calls_tool("ask_user", {"question": "Which colour?", "choices": ["red", "blue"]}),
            reply("I will pick one myself."),  # the replay, after the declined question
        ]
    )
    agents = {"worker": {"tools": ["ask_user"]}}
    async with (
        parley_app({}, agents=agents, directory=tmp_path, model=model) as parley,
        parley.mcp() as client,
    ):
        original = await call(client, "start_session", agent="worker", message="hello")
        started = await call(client, "replay_session", session_id=original["session_id"])
        replay = await settled(client, started["session_id"])
        inbox = await call(client, "list_pending")

    model.assert_complete()
    assert replay["pending"] == [] and inbox["pending"] == [], "the new question was put to nobody"
    assert call_rows(tmp_path / "parley.db", replay["session_id"]) == [("ask_user", "succeeded")]
    assert tool_results(replay)["ask_user"]["text"] == NEW_QUESTION
    note = model.requests[-1].messages[-1]
    assert note.role == "tool" and note.tool_name == "ask_user" and note.text == NEW_QUESTION, (
        "the model reads that the question was declined"
    )
    assert replay["last_turn"]["status"] == "answered"
    assert replay["last_turn"]["answer"] == "I will pick one myself."


async def test_a_durable_wait_completes_at_once_in_a_replay(tmp_path: Path) -> None:
    """The original waited an hour on a clock the test moved; the replay runs on the same clock,
    never moved again, and still finishes."""
    clock = ManualClock()
    agents = {"napper": {"tools": ["durable_wait"]}}
    db = tmp_path / "parley.db"
    async with (
        parley_app({}, agents=agents, directory=tmp_path, clock=clock) as parley,
        parley.mcp() as client,
    ):
        started = await call(
            client, "start_session", agent="napper", message="/wait 3600 cool down", wait_seconds=0
        )
        sid = started["session_id"]

        async def parked() -> bool:
            return call_rows(db, sid) == [("durable_wait", "waiting_for_timer")]

        await eventually(parked, "the original to wait on its timer")
        parley.advance(3601)
        original = await settled(client, sid)
        replayed = await call(client, "replay_session", session_id=sid)
        replay = await settled(client, replayed["session_id"])

    assert call_rows(db, sid) == [("durable_wait", "succeeded")]
    assert original["last_turn"]["status"] == "answered"
    assert call_rows(db, replay["session_id"]) == [("durable_wait", "succeeded")]
    assert tool_results(replay)["durable_wait"]["text"] == WAITED
    assert replay["last_turn"]["status"] == "answered" and WAITED in replay["last_turn"]["answer"]


def _remote(db: Path, sid: str, name: str) -> dict[str, Any] | None:
    """The downstream handle stored on the session's call of `name` (None: it never ran remotely)."""
    rows = db_rows(db, "SELECT remote FROM tool_calls WHERE session_id = ? AND name = ?", (sid, name))
    [(remote,)] = rows
    return json.loads(remote) if remote else None


async def test_a_downstream_task_follows_its_tools_class_in_a_replay(tmp_path: Path) -> None:
    """The downstream server is another parley over HTTP, whose start_session runs as a 2026-07-28
    MCP task. The outer agent calls it through two entries: one configured as read, one not. In
    the replay the read runs as a task again (the inner parley starts a session); the other gets
    the original's recorded result and never reaches the inner server."""
    # Short pauses between polls of a task, suggested by the inner server and kept by the outer one.
    inner_settings = {"tasks": {"poll_interval_s": 0.05}}
    inner_config = write_config(tmp_path / "inner", inner_settings, agents={"helper": {"tools": []}})
    look = {"agent": "helper", "message": "look around"}
    act = {"agent": "helper", "message": "change something"}
    message = f"/tool look__start_session {json.dumps(look)}\n/tool act__start_session {json.dumps(act)}"
    async with parley_app(inner_config) as inner:
        endpoint = await inner.http()
        polling = {"url": endpoint.url, "task_poll_min_s": 0.05, "task_poll_max_s": 0.1}
        servers = {
            "look": {**polling, "tools": {"start_session": {"effect": "read", "approval": "never"}}},
            "act": {**polling, "tools": {"start_session": {"approval": "never"}}},
        }
        boss = {
            "mcp_servers": [
                {"server": "look", "include": ["start_session"]},
                {"server": "act", "include": ["start_session"]},
            ]
        }
        outer_dir = tmp_path / "outer"
        outer = {"mcp_servers": servers}
        running = parley_app(outer, agents={"boss": boss}, directory=outer_dir)
        async with running as parley, parley.mcp() as client:
            first = await call(client, "start_session", agent="boss", message=message)
            original = await settled(client, first["session_id"])
            started = await call(client, "replay_session", session_id=first["session_id"])
            replay = await settled(client, started["session_id"])
        async with inner.mcp() as inner_client:
            inner_sessions = await call(inner_client, "list_sessions", limit=50)

    db = outer_dir / "parley.db"
    for name in ("look__start_session", "act__start_session"):
        remote = _remote(db, original["session_id"], name)
        assert remote is not None and remote["kind"] == "task" and remote["task_id"], (name, remote)
    looked = _remote(db, replay["session_id"], "look__start_session")
    assert looked is not None and looked["kind"] == "task", "the configured read ran as a task again"
    assert _remote(db, replay["session_id"], "act__start_session") is None, "the write never ran"
    assert call_rows(db, replay["session_id"]) == [
        ("look__start_session", "succeeded"),
        ("act__start_session", "succeeded"),
    ]
    results, originals = tool_results(replay), tool_results(original)
    assert results["act__start_session"]["text"] == originals["act__start_session"]["text"], (
        "the write got the recorded result"
    )
    titles = sorted(s["title"] for s in inner_sessions["sessions"])
    assert titles == ["change something", "look around", "look around"], (
        "the inner server ran the read twice (original and replay) and the write once"
    )


def _asking(question: str) -> dict[str, Any]:
    return {"agent": "asker", "message": f"/ask {question} | small | large"}


# How the outer parley reaches the inner one: the 2026-07-28 tasks extension, whose input
# requests become questions sent back with tasks/update; or a 2025-11-25 task the server offers,
# whose question is asked in place on tasks/result.
GENERATIONS = {"modern": {}, "legacy": {"protocol": "legacy", "call_as_task": "when_offered"}}


@pytest.mark.parametrize("generation", list(GENERATIONS))
async def test_a_downstream_question_in_a_replay_gets_the_recorded_answer_or_is_declined(
    tmp_path: Path, generation: str
) -> None:
    """A configured read runs in a replay, so its server may ask again. The question the original
    answered gets that answer; a question the original never had is declined. Nobody is asked and
    the replay never waits for a person."""
    inner_settings = {"tasks": {"poll_interval_s": 0.05}}
    inner_config = write_config(tmp_path / "inner", inner_settings, agents={"asker": {"tools": ["ask_user"]}})
    known, new = _asking("Which box?"), _asking("Which bag?")
    model = ScriptedModel(
        [
            calls_tool("look__start_session", known),  # the original
            reply("Packed."),
            calls_tool("look__start_session", known),  # the replay: the same question...
            calls_tool("look__start_session", new),  # ...and one the original never had
            reply("Packed again."),
        ]
    )
    async with parley_app(inner_config) as inner:
        endpoint = await inner.http()
        look = {
            "url": endpoint.url,
            "task_poll_min_s": 0.05,
            "task_poll_max_s": 0.1,
            "tools": {"start_session": {"effect": "read", "approval": "never"}},
            **GENERATIONS[generation],
        }
        boss = {"mcp_servers": [{"server": "look", "include": ["start_session"]}]}
        outer_dir = tmp_path / "outer"
        running = parley_app(
            {"mcp_servers": {"look": look}}, agents={"boss": boss}, directory=outer_dir, model=model
        )
        async with running as parley, parley.mcp() as client:
            first = await call(client, "start_session", agent="boss", message="pack")
            [question] = first["pending"]
            answer = {"interrupt_id": question["id"], "answer": "large"}
            await call(client, "answer_question", session_id=first["session_id"], **answer)
            started = await call(client, "replay_session", session_id=first["session_id"])
            replay = await settled(client, started["session_id"])
            inbox = await call(client, "list_pending")

    model.assert_complete()
    assert replay["pending"] == [] and inbox["pending"] == [], "nobody was asked"
    sql = "SELECT status, resolved_by FROM interrupts WHERE session_id = ? ORDER BY created_at"
    resolved = db_rows(outer_dir / "parley.db", sql, (replay["session_id"],))
    assert resolved == [("answered", "replay"), ("declined", "replay")]
    results = [m["text"] for m in replay["messages"] if m["role"] == "tool"]
    assert len(results) == 2 and "The user answered: large" in results[0], results
    assert "The user declined to answer" in results[1], results
    assert replay["last_turn"]["answer"] == "Packed again."
