"""One parley using another parley's agents as tools: the downstream side of 2026-07-28 tasks.

The outer server ("boss") connects to an inner parley over streamable HTTP, declares the tasks
extension, and so gets a task handle for `sub__start_session`. It polls the inner task on stored
timers, turns the inner task's input requests into questions of its own session, and sends the
answers with tasks/update; cancelling the outer turn sends tasks/cancel to the inner server.
Both parleys run in the test's process, the inner one served on a loopback port.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.support import (
    TEST_DEADLINE_S,
    InProcessServer,
    call,
    db_rows,
    eventually,
    serving,
    write_config,
)
from tests.support import Served as ServedBase

pytestmark = pytest.mark.anyio


@dataclass
class Served(ServedBase):
    @property
    def sub_db(self) -> Path:
        """The database of the inner parley (the sub-agents' server)."""
        return self.directory / "sub" / "parley.db"


def _delegating_to(server: str) -> dict[str, Any]:
    """An agent whose only tool is `start_session` of the inner parley `server`, never asking."""
    only_start = {"server": server, "include": ["start_session"]}
    return {"mcp_servers": [{**only_start, "tools": {"start_session": {"approval": "never"}}}]}


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    directory = tmp_path_factory.mktemp("subagent")
    sub_config = write_config(directory / "sub", agents={"asker": {"tools": ["ask_user"]}})
    async with InProcessServer(sub_config, http=True) as sub:
        inner = {"url": sub.url, "task_poll_min_s": 0.1, "task_poll_max_s": 0.5}
        config = write_config(
            directory,
            agents={"boss": _delegating_to("sub"), "boss_legacy": _delegating_to("legacy_sub")},
            mcp_servers={
                "sub": inner,
                # The same inner server over the 2025-11-25 handshake, where its turn tools *offer* tasks.
                "legacy_sub": {**inner, "protocol": "legacy", "call_as_task": "when_offered"},
            },
        )
        async with serving(config, mode="legacy", world=Served) as served:
            yield served


def _delegate(message: str) -> str:
    arguments = {"agent": "asker", "message": message}
    return "/tool sub__start_session " + json.dumps(arguments)


async def _start(client: Client, message: str) -> dict[str, Any]:
    return await call(
        client, "start_session", agent="boss", message=_delegate(message), wait_seconds=TEST_DEADLINE_S
    )


async def _answer(
    client: Client, waiting: dict[str, Any], interrupt_id: str, **answer: Any
) -> dict[str, Any]:
    """Answer (or decline) the outer session's question and wait for the turn it resumes."""
    arguments = {"session_id": waiting["session_id"], "interrupt_id": interrupt_id, **answer}
    return await call(client, "answer_question", wait_seconds=TEST_DEADLINE_S, **arguments)


def _remote_of(db: Path, session_id: str) -> list[tuple[Any, ...]]:
    return db_rows(db, "SELECT status, remote FROM tool_calls WHERE session_id = ?", (session_id,))


async def test_a_sub_agents_question_is_answered_in_the_outer_session(served: Served) -> None:
    client = served.client
    out = await _start(client, "/ask Which colour? | red | blue")
    assert out["status"] == "waiting_for_input", out
    (question,) = out["pending"]
    assert question["question"] == "Which colour?" and question["choices"] == ["red", "blue"]
    assert question["tool"] == "sub__start_session"
    # The outer call waits on the inner task, stored on the call.
    ((status, remote),) = _remote_of(served.db, out["session_id"])
    assert status == "awaiting_answer" and json.loads(remote)["task_id"].startswith("task_")
    out = await _answer(client, out, question["id"], answer="blue")
    assert out["status"] == "answered", out
    assert "The user answered: blue" in out["answer"]
    assert [(c["tool"], c["status"]) for c in out["tool_calls"]] == [("sub__start_session", "succeeded")]
    # The inner server ran one session, whose task ended with the outer user's answer.
    assert db_rows(served.sub_db, "SELECT status FROM tasks") == [("completed",)]


async def test_a_decline_reaches_the_sub_agent_as_a_decline(served: Served) -> None:
    client = served.client
    out = await _start(client, "/ask Ship it? | yes | no")
    assert out["status"] == "waiting_for_input", out
    out = await _answer(client, out, out["pending"][0]["id"], decline=True)
    assert out["status"] == "answered", out
    assert "declined" in out["answer"].lower()


async def test_cancelling_the_outer_turn_cancels_the_inner_task(served: Served) -> None:
    client = served.client
    out = await call(client, "start_session", agent="boss", message=_delegate("/sleep 3600"), wait_seconds=0)
    session_id = out["session_id"]

    async def polling() -> bool:
        rows = _remote_of(served.db, session_id)
        return bool(rows) and rows[0][0] == "waiting_for_task"

    await eventually(polling, "the outer call waits on the inner task")
    cancelled = await call(client, "cancel_turn", session_id=session_id, wait_seconds=TEST_DEADLINE_S)
    assert cancelled["status"] == "cancelled", cancelled
    # The inner task was cancelled, and with it the inner turn.
    inner = db_rows(served.sub_db, "SELECT status, turn_id FROM tasks ORDER BY created_at DESC LIMIT 1")
    assert inner and inner[0][0] == "cancelled", inner

    async def inner_turn_cancelled() -> bool:
        rows = db_rows(served.sub_db, "SELECT status FROM turns WHERE id = ?", (inner[0][1],))
        return rows == [("cancelled",)]

    await eventually(inner_turn_cancelled, "the inner turn is cancelled")
    ((status, _remote),) = _remote_of(served.db, session_id)
    assert status == "outcome_unknown"  # a started session may have done something before the cancel


async def test_a_2025_11_25_task_offered_by_the_server_is_taken_and_its_question_answered(
    served: Served,
) -> None:
    """With call_as_task: when_offered, a tool whose server offers tasks (taskSupport optional)
    runs as a 2025-11-25 task; the inner task's question arrives on tasks/result, tagged with the
    task, and becomes a question of the outer session."""
    message = json.dumps({"agent": "asker", "message": "/ask Which size? | small | large"})
    client = served.client
    out = await call(
        client,
        "start_session",
        agent="boss_legacy",
        message=f"/tool legacy_sub__start_session {message}",
        wait_seconds=TEST_DEADLINE_S,
    )
    assert out["status"] == "waiting_for_input", out
    (question,) = out["pending"]
    assert question["question"] == "Which size?" and question["choices"] == ["small", "large"]
    ((_status, remote),) = _remote_of(served.db, out["session_id"])
    assert json.loads(remote)["generation"] == "2025-11-25"
    out = await _answer(client, out, question["id"], answer="large")
    assert out["status"] == "answered", out
    assert "The user answered: large" in out["answer"]
    assert [(c["tool"], c["status"]) for c in out["tool_calls"]] == [
        ("legacy_sub__start_session", "succeeded")
    ]
