"""Task sessions, agent kinds and inputs, and idempotent sends, with parley in the test's process
(the composition root of `parley serve`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from tests.support import Served, call, call_error, db_rows, serving, write_config

pytestmark = pytest.mark.anyio

REPORTER = {
    "description": "Writes a report about a topic.",
    "kinds": ["task"],
    "input_schema": {
        "type": "object",
        "properties": {
            "topic": {"type": "string", "minLength": 1},
            "pages": {"type": "integer", "minimum": 1},
        },
        "required": ["topic"],
        "additionalProperties": False,
    },
    "result": {
        "type": "object",
        "properties": {"title": {"type": "string"}, "pages": {"type": "integer"}},
        "required": ["title", "pages"],
    },
    "limits": {"max_result_nudges": 2},
}

CASES = [("stdio", "legacy"), ("http", "auto")]


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    config = write_config(tmp_path_factory.mktemp("tasks"), agents={"reporter": REPORTER})
    transport, mode = request.param
    async with serving(config, mode=mode, http=transport == "http") as served:
        yield served


async def test_list_agents_shows_kinds_and_schemas(served: Served) -> None:
    agents = {a["name"]: a for a in (await call(served.client, "list_agents"))["agents"]}
    reporter = agents["reporter"]
    assert reporter["kinds"] == ["task"]
    assert reporter["default_kind"] == "task"
    assert reporter["input_schema"]["required"] == ["topic"]
    assert reporter["result_schema"]["required"] == ["title", "pages"]
    assert "set_result" in reporter["tools"]
    assert agents["demo"]["kinds"] == ["chat", "task"]


async def test_task_completes_with_a_checked_result_after_one_correction(served: Served) -> None:
    message = '/result {"title": "Otters"}\n/result {"title": "Otters", "pages": 3}'
    outcome = await call(
        served.client, "start_session", agent="reporter", inputs={"topic": "otters"}, message=message
    )
    assert outcome["status"] == "completed", outcome
    assert outcome["result"] == {"title": "Otters", "pages": 3}
    assert outcome["session_status"] == "completed"
    statuses = [(c["tool"], c["status"]) for c in outcome["tool_calls"]]
    assert statuses == [("set_result", "failed"), ("set_result", "succeeded")]
    assert "pages" in (outcome["tool_calls"][0]["result"] or "")
    snapshot = await call(served.client, "get_session", session_id=outcome["session_id"])
    assert snapshot["status"] == "completed"
    assert snapshot["result"] == {"title": "Otters", "pages": 3}
    assert snapshot["inputs"] == {"topic": "otters"}
    assert snapshot["kind"] == "task"
    text = await call_error(served.client, "send_message", session_id=outcome["session_id"], message="more?")
    assert "completed" in text


async def test_task_that_never_sets_a_result_fails_after_the_nudges(served: Served) -> None:
    outcome = await call(served.client, "start_session", agent="reporter", inputs={"topic": "bees"})
    assert outcome["status"] == "failed"
    assert "set_result" in outcome["error"] and "2 reminder" in outcome["error"]
    sid = outcome["session_id"]
    snapshot = await call(served.client, "get_session", session_id=sid, messages_from=1)
    assert snapshot["status"] == "failed"
    assert snapshot["last_error"] == outcome["error"]
    assert snapshot["usage"]["model_calls"] == 3  # the answer and one call after each of 2 nudges
    nudges = db_rows(
        served.db, "SELECT COUNT(*) FROM messages WHERE session_id = ? AND content LIKE '%nudge%'", (sid,)
    )
    assert nudges == [(2,)]
    text = await call_error(served.client, "send_message", session_id=sid, message="try again")
    assert "failed" in text


async def test_demo_agent_runs_task_sessions_too(served: Served) -> None:
    outcome = await call(
        served.client, "start_session", agent="demo", kind="task", message='/result {"summary": "done"}'
    )
    assert outcome["status"] == "completed"
    assert outcome["result"] == {"summary": "done"}


async def test_inputs_and_kinds_are_checked_before_anything_is_stored(served: Served) -> None:
    before = db_rows(served.db, "SELECT COUNT(*) FROM sessions")
    text = await call_error(served.client, "start_session", agent="reporter", inputs={"pages": 2})
    assert "'inputs'" in text and "topic" in text
    text = await call_error(
        served.client, "start_session", agent="reporter", inputs={"topic": "x", "colour": 1}
    )
    assert "colour" in text
    text = await call_error(
        served.client, "start_session", agent="reporter", kind="chat", inputs={"topic": "x"}
    )
    assert "'kind'" in text and "task" in text
    text = await call_error(served.client, "start_session", agent="demo", inputs={"topic": "x"})
    assert "takes no inputs" in text
    text = await call_error(served.client, "start_session", agent="demo", kind="essay", message="x")
    assert "'kind'" in text
    assert db_rows(served.db, "SELECT COUNT(*) FROM sessions") == before


async def test_a_retried_send_message_produces_one_message_and_one_turn(served: Served) -> None:
    sid = (await call(served.client, "start_session", agent="demo"))["session_id"]
    first = await call(served.client, "send_message", session_id=sid, message="once", client_message_id="m-1")
    retry = await call(served.client, "send_message", session_id=sid, message="once", client_message_id="m-1")
    assert retry["turn_id"] == first["turn_id"]
    assert retry["answer"] == first["answer"] == "You said: once (message 1 of this session)"
    users = db_rows(served.db, "SELECT COUNT(*) FROM messages WHERE session_id = ? AND role = 'user'", (sid,))
    turns = db_rows(served.db, "SELECT COUNT(*) FROM turns WHERE session_id = ?", (sid,))
    assert users == [(1,)] and turns == [(1,)]
    text = await call_error(
        served.client, "send_message", session_id=sid, message="other", client_message_id="m-1"
    )
    assert "'client_message_id'" in text
    text = await call_error(
        served.client, "send_message", session_id=sid, message="x", client_message_id="bad id!"
    )
    assert "'client_message_id'" in text


async def test_a_retry_while_the_turn_runs_waits_for_the_same_turn(served: Served) -> None:
    sid = (await call(served.client, "start_session", agent="demo"))["session_id"]
    # The turn waits on a question until the test answers it, so the retries arrive while it runs.
    asking = "/ask Go on? | yes | no"
    first = await call(
        served.client, "send_message", session_id=sid, message=asking, client_message_id="s", wait_seconds=0
    )
    assert first["status"] == "running"
    results: list[dict[str, Any]] = []

    async def retry() -> None:
        results.append(
            await call(served.client, "send_message", session_id=sid, message=asking, client_message_id="s")
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(retry)
        tg.start_soon(retry)
    assert [r["status"] for r in results] == ["waiting_for_input", "waiting_for_input"]
    turn_ids = {r["turn_id"] for r in results}
    assert len(turn_ids) == 1
    assert first["turn_id"] in (None, *turn_ids)
    [question] = {p["id"] for r in results for p in r["pending"]}
    answered = await call(
        served.client, "answer_question", session_id=sid, interrupt_id=question, answer="yes"
    )
    assert answered["status"] == "answered" and answered["turn_id"] in turn_ids
    # A retry after the turn ended gets that same turn's answer.
    await retry()
    assert results[-1]["status"] == "answered" and results[-1]["turn_id"] in turn_ids
    turns = db_rows(served.db, "SELECT COUNT(*) FROM turns WHERE session_id = ?", (sid,))
    assert turns == [(1,)]


async def test_a_retried_start_session_returns_the_same_session(served: Served) -> None:
    first = await call(
        served.client, "start_session", agent="demo", message="hi", client_message_id="start-1"
    )
    retry = await call(
        served.client, "start_session", agent="demo", message="hi", client_message_id="start-1"
    )
    assert retry["session_id"] == first["session_id"]
    assert retry["turn_id"] == first["turn_id"]
    count = db_rows(served.db, "SELECT COUNT(*) FROM sessions WHERE start_client_message_id = 'start-1'")
    assert count == [(1,)]
    text = await call_error(
        served.client, "start_session", agent="demo", message="bye", client_message_id="start-1"
    )
    assert "'client_message_id'" in text
