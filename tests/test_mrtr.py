"""2026-07-28 clients that can show forms but have no tasks: a pending approval or question goes
out as an input-required result, and the SDK client retries the same call with the answer.
parley and the fixture MCP server run in the test's process; "stdio" is a client bound in memory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types
import pytest
from mcp import Client

from tests.support import FIXTURE_LOG, call, db_rows, fixture_in_process, serving, write_config
from tests.support import Served as ServedBase

pytestmark = pytest.mark.anyio


@dataclass
class Served(ServedBase):
    """The module's server; each test connects a client that answers forms from `answers`."""

    answers: list[dict[str, Any]] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)

    def eliciting_client(self) -> Client:
        async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
            self.asked.append(params.message)
            answer = self.answers.pop(0) if self.answers else {"action": "cancel"}
            return types.ElicitResult(**answer)

        target: Any = self.server.url if self.server.http else self.server.transport()
        return Client(target, elicitation_callback=on_elicit)


@pytest.fixture(scope="module", params=["stdio", "http"])
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    directory = tmp_path_factory.mktemp("mrtr")
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_config(
            directory,
            agents={"worker": {"mcp_servers": ["fixture"], "tools": ["ask_user"]}},
            mcp_servers={"fixture": fixture},
        )
        async with serving(config, mode=None, http=request.param == "http", world=Served) as served:
            yield served


async def _with_client(served: Served, work: Callable[[Client], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    async with served.eliciting_client() as client:
        assert client.protocol_version == "2026-07-28"
        return await work(client)


async def test_an_approval_is_answered_through_input_required_inside_one_call(served: Served) -> None:
    served.answers = [{"action": "accept", "content": {"decision": "approve"}}]
    before = served.runs("bare", text="via mrtr")

    async def work(client: Client) -> dict[str, Any]:
        return await call(
            client, "start_session", agent="worker", message='/tool fixture__bare {"text": "via mrtr"}'
        )

    outcome = await _with_client(served, work)
    assert outcome["status"] == "answered" and "bare via mrtr" in outcome["answer"]
    assert served.runs("bare", text="via mrtr") == before + 1
    assert any("fixture__bare" in m for m in served.asked)
    users = db_rows(
        served.db,
        "SELECT COUNT(*) FROM messages WHERE session_id = ? AND role = 'user'",
        (outcome["session_id"],),
    )
    assert users == [(1,)], "the retried call did not send the message again"


async def test_a_dismissed_form_leaves_the_approval_pending(served: Served) -> None:
    served.answers = [{"action": "cancel"}]

    async def work(client: Client) -> dict[str, Any]:
        return await call(
            client, "start_session", agent="worker", message='/tool fixture__bare {"text": "later"}'
        )

    outcome = await _with_client(served, work)
    assert outcome["status"] == "waiting_for_input"
    assert [p["kind"] for p in outcome["pending"]] == ["approval"]


async def test_a_question_is_answered_and_an_answer_outside_the_choices_is_not_taken(served: Served) -> None:
    served.answers = [{"action": "accept", "content": {"answer": "green"}}]

    async def ask(client: Client) -> dict[str, Any]:
        return await call(client, "start_session", agent="worker", message="/ask Colour? | red | blue")

    outcome = await _with_client(served, ask)
    assert outcome["status"] == "waiting_for_input", "green is not a choice: still pending"
    sid = outcome["session_id"]

    async def again(client: Client) -> dict[str, Any]:
        return await call(client, "send_message", session_id=sid, message="and?")

    # The question of the first turn is still pending: this message waits behind it, so answer it here.
    pending = outcome["pending"][0]["id"]

    async def answer(client: Client) -> dict[str, Any]:
        return await call(client, "answer_question", session_id=sid, interrupt_id=pending, answer="blue")

    answered = await _with_client(served, answer)
    assert answered["status"] == "answered" and "The user answered: blue" in answered["answer"]
    follow_up = await _with_client(served, again)
    assert follow_up["status"] == "answered"
