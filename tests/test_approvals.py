"""Human in the loop: approvals, questions and deadlines through the tools and elicitation,
against parley in the test's process (the composition root of `parley serve`, served over
streamable HTTP on a loopback port) whose agents use the fixture MCP server, in this process too
(it logs every call it really runs). Decisions made with the `parley` command line, and
elicitation over parley's own stdio, need processes: tests/test_e2e_approvals.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client

from parley.tls import http_client
from tests.support import (
    FIXTURE_LOG,
    STATE_WINDOW_S,
    TEST_DEADLINE_S,
    Database,
    Served,
    call,
    call_error,
    db_rows,
    eventually,
    fixture_in_process,
    http_mcp_client,
    serving,
    write_config,
)

pytestmark = pytest.mark.anyio

UNKNOWN_INTERRUPT = "int_" + "0" * 32
MAX_TIMER_S = 60

AGENTS: dict[str, dict[str, Any]] = {
    "worker": {"mcp_servers": ["fixture"], "tools": ["ask_user", "durable_wait"]},
    "guarded": {"mcp_servers": ["fixture"], "tools": ["ask_user"], "approver": "human"},
    "hasty": {
        "mcp_servers": ["fixture"],
        "tools": ["ask_user"],
        "approval_deadline_s": 0.5,
        "question_deadline_s": 0.5,
    },
}


def write_world_config(directory: Path, fixture: dict[str, Any], database: Database | None = None) -> Path:
    """parley.yaml with the agents above and the fixture MCP server `fixture` (its parley.yaml
    entry: `fixture_in_process` or `fixture_server`, logging to fixture.jsonl in `directory`)."""
    return write_config(
        directory,
        runtime={"max_timer_s": MAX_TIMER_S},
        agents=AGENTS,
        mcp_servers={"fixture": fixture},
        database=database,
    )


@dataclass
class Person:
    """A person behind an MCP client that handles form elicitation."""

    reply: Callable[[types.ElicitRequestParams], types.ElicitResult]
    asked: list[types.ElicitRequestParams] = field(default_factory=list)

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        return self.reply(params)

    @classmethod
    def accepting(cls, content: dict[str, Any]) -> Person:
        return cls(lambda _params: types.ElicitResult(action="accept", content=content))

    @classmethod
    def dismissing(cls) -> Person:
        return cls(lambda _params: types.ElicitResult(action="cancel"))


@dataclass
class World(Served):
    @property
    def config(self) -> Path:
        return self.server.config_path

    def interrupts(self, session_id: str) -> list[tuple[str, str, str | None]]:
        return db_rows(
            self.db,
            "SELECT id, status, resolved_by FROM interrupts WHERE session_id = ? ORDER BY created_at, id",
            (session_id,),
        )

    def call_statuses(self, session_id: str) -> list[tuple[str, str]]:
        return db_rows(
            self.db,
            "SELECT name, status FROM tool_calls WHERE session_id = ? ORDER BY step_no, call_index",
            (session_id,),
        )

    @property
    def url(self) -> str:
        assert self.server.url is not None
        return self.server.url

    @asynccontextmanager
    async def person_client(self, person: Any) -> AsyncIterator[Client]:
        """A 2025-11-25 client that puts elicitation requests to `person` (an elicitation callback)."""
        async with http_mcp_client(self.url, mode="legacy", elicitation_callback=person) as client:
            yield client

    async def health(self) -> dict[str, Any]:
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            response = await http.get(self.server.base_url + "/healthz")
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    """One HTTP server for the module: plain clients decide with the tools, eliciting clients
    connect next to them."""
    directory = tmp_path_factory.mktemp("approvals")
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_world_config(directory, fixture)
        async with serving(config, name="approvals", http=True, clean_log=True, world=World) as world:
            yield world


async def park(world: World, message: str, agent: str = "worker") -> dict[str, Any]:
    outcome = await call(world.client, "start_session", agent=agent, message=message)
    assert outcome["status"] == "waiting_for_input", outcome
    return outcome


def _calls(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["tool"]: c for c in outcome["tool_calls"]}


# ------------------------------------------------------------------ approving through the tools


async def test_an_unclassified_call_waits_for_approval_and_runs_once_when_approved(world: World) -> None:
    outcome = await park(world, '/tool fixture__bare {"text": "approve me"}')
    sid = outcome["session_id"]
    [pending] = outcome["pending"]
    assert pending["kind"] == "approval"
    assert pending["tool"] == "fixture__bare"
    assert pending["arguments"] == {"text": "approve me"}
    assert pending["effect"] == "unclassified"
    assert pending["id"].startswith("int_")
    assert _calls(outcome)["fixture__bare"]["status"] == "pending_approval"

    snapshot = await call(world.client, "get_session", session_id=sid)
    assert snapshot["status"] == "waiting_for_input"
    assert [p["id"] for p in snapshot["pending"]] == [pending["id"]]
    assert world.runs("bare", text="approve me") == 0, "nothing runs before the approval"

    resumed = await call(
        world.client,
        "approve",
        session_id=sid,
        decisions=[{"interrupt_id": pending["id"], "approved": True}],
    )
    assert resumed["status"] == "answered", resumed
    assert _calls(resumed)["fixture__bare"]["status"] == "succeeded"
    assert "bare approve me" in resumed["answer"], "the model's answer uses the tool's result"
    assert world.runs("bare", text="approve me") == 1
    after = await call(world.client, "get_session", session_id=sid)
    assert after["status"] == "idle" and after["pending"] == []


async def test_a_rejected_call_never_runs_and_the_agent_reads_the_reason(world: World) -> None:
    outcome = await park(world, '/tool fixture__append_note {"note": "rejected note"}')
    [pending] = outcome["pending"]
    assert pending["effect"] == "non_idempotent_write"
    resumed = await call(
        world.client,
        "approve",
        session_id=outcome["session_id"],
        decisions=[{"interrupt_id": pending["id"], "approved": False, "reason": "not on Fridays"}],
    )
    assert resumed["status"] == "answered", resumed
    assert _calls(resumed)["fixture__append_note"]["status"] == "rejected"
    assert "A person declined this call: not on Fridays" in resumed["answer"]
    assert world.runs("append_note", note="rejected note") == 0


async def test_a_read_call_runs_at_once_while_its_sibling_waits_for_approval(world: World) -> None:
    outcome = await park(
        world, '/tool fixture__read_thing {"name": "sibling"}\n/tool fixture__append_note {"note": "sibling"}'
    )
    calls = _calls(outcome)
    assert calls["fixture__read_thing"]["status"] == "succeeded"
    assert calls["fixture__append_note"]["status"] == "pending_approval"
    assert [p["tool"] for p in outcome["pending"]] == ["fixture__append_note"]
    assert world.runs("read_thing", name="sibling") == 1
    assert world.runs("append_note", note="sibling") == 0

    resumed = await call(
        world.client,
        "approve",
        session_id=outcome["session_id"],
        decisions=[{"interrupt_id": outcome["pending"][0]["id"], "approved": True}],
    )
    assert resumed["status"] == "answered"
    assert "thing sibling is fine" in resumed["answer"] and "appended sibling" in resumed["answer"]
    assert world.runs("read_thing", name="sibling") == 1, "the read call was not run again"
    assert world.runs("append_note", note="sibling") == 1


async def test_a_question_is_answered_with_one_of_its_choices(world: World) -> None:
    outcome = await park(world, "/ask Which colour? | red | blue")
    [pending] = outcome["pending"]
    assert pending["kind"] == "question"
    assert pending["question"] == "Which colour?" and pending["choices"] == ["red", "blue"]
    resumed = await call(
        world.client,
        "answer_question",
        session_id=outcome["session_id"],
        interrupt_id=pending["id"],
        answer="BLUE",
    )
    assert resumed["status"] == "answered", resumed
    assert "The user answered: blue" in resumed["answer"], "matched to the choice as it was offered"


async def test_approving_one_of_two_calls_runs_it_and_keeps_waiting_for_the_other(world: World) -> None:
    outcome = await park(
        world,
        '/tool fixture__bare {"text": "first of two"}\n/tool fixture__append_note {"note": "second of two"}',
    )
    sid = outcome["session_id"]
    ids = {p["tool"]: p["id"] for p in outcome["pending"]}
    assert set(ids) == {"fixture__bare", "fixture__append_note"}
    partial = await call(
        world.client,
        "approve",
        session_id=sid,
        decisions=[{"interrupt_id": ids["fixture__bare"], "approved": True}],
    )
    assert partial["status"] == "waiting_for_input", partial
    assert [p["id"] for p in partial["pending"]] == [ids["fixture__append_note"]]
    assert _calls(partial)["fixture__bare"]["status"] == "succeeded"
    assert world.runs("bare", text="first of two") == 1
    assert world.runs("append_note", note="second of two") == 0

    done = await call(
        world.client,
        "approve",
        session_id=sid,
        decisions=[
            {"interrupt_id": ids["fixture__append_note"], "approved": False, "reason": "one is enough"}
        ],
    )
    assert done["status"] == "answered", done
    assert "bare first of two" in done["answer"]
    assert "A person declined this call: one is enough" in done["answer"]
    assert world.runs("bare", text="first of two") == 1
    assert world.runs("append_note", note="second of two") == 0


async def test_one_approve_call_decides_several_calls_at_once(world: World) -> None:
    outcome = await park(
        world, '/tool fixture__bare {"text": "together"}\n/tool fixture__append_note {"note": "together"}'
    )
    ids = {p["tool"]: p["id"] for p in outcome["pending"]}
    done = await call(
        world.client,
        "approve",
        session_id=outcome["session_id"],
        decisions=[
            {"interrupt_id": ids["fixture__bare"], "approved": True},
            {"interrupt_id": ids["fixture__append_note"], "approved": False, "reason": "no notes today"},
        ],
    )
    assert done["status"] == "answered", done
    calls = _calls(done)
    assert calls["fixture__bare"]["status"] == "succeeded"
    assert calls["fixture__append_note"]["status"] == "rejected"
    assert "A person declined this call: no notes today" in done["answer"]
    assert world.runs("bare", text="together") == 1
    assert world.runs("append_note", note="together") == 0


async def test_a_question_without_choices_takes_free_text_or_a_decline(world: World) -> None:
    free = await park(world, "/ask What should the release be called?")
    assert free["pending"][0]["choices"] == [] and free["pending"][0]["allows_free_text"] is True
    named = await call(
        world.client,
        "answer_question",
        session_id=free["session_id"],
        interrupt_id=free["pending"][0]["id"],
        answer="Blue Heron",
    )
    assert "The user answered: Blue Heron" in named["answer"]
    other = await park(world, "/ask Your birthday?")
    declined = await call(
        world.client,
        "answer_question",
        session_id=other["session_id"],
        interrupt_id=other["pending"][0]["id"],
        decline=True,
    )
    assert declined["status"] == "answered"
    assert "The user declined to answer" in declined["answer"]
    open_ended = await park(
        world,
        '/tool ask_user {"question": "Size?", "choices": ["S", "M"], "allows_free_text": true}',
    )
    custom = await call(
        world.client,
        "answer_question",
        session_id=open_ended["session_id"],
        interrupt_id=open_ended["pending"][0]["id"],
        answer="XXL",
    )
    assert "The user answered: XXL" in custom["answer"]


async def test_malformed_ask_user_and_durable_wait_calls_go_back_to_the_agent_as_errors(world: World) -> None:
    outcome = await call(
        world.client,
        "start_session",
        agent="worker",
        message='/tool ask_user {"choices": ["a"]}\n/tool durable_wait {"duration_seconds": -1}',
    )
    assert outcome["status"] == "answered", outcome
    calls = _calls(outcome)
    assert calls["ask_user"]["status"] == calls["durable_wait"]["status"] == "failed"
    assert "question" in calls["ask_user"]["result"]
    assert "duration_seconds" in calls["durable_wait"]["result"]
    assert world.interrupts(outcome["session_id"]) == []


# ------------------------------------------------------------------ durable waits


async def test_a_durable_wait_parks_the_turn_until_its_timer_fires(world: World) -> None:
    started = await call(
        world.client,
        "start_session",
        agent="worker",
        message=f"/wait {STATE_WINDOW_S:g} let it settle",
        wait_seconds=0,
    )
    sid = started["session_id"]

    async def waiting() -> bool:
        snapshot = await call(world.client, "get_session", session_id=sid)
        return bool(snapshot["status"] == "running" and snapshot["phase"] == "waiting")

    await eventually(waiting, "the turn to wait on its timer")
    settled = await call(world.client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    assert settled["status"] == "idle"
    assert settled["last_turn"]["status"] == "answered"
    assert "The wait is over; carry on." in settled["last_turn"]["answer"]


async def test_a_durable_wait_longer_than_max_timer_s_is_refused(world: World) -> None:
    started = await call(
        world.client,
        "start_session",
        agent="worker",
        message=f"/wait {MAX_TIMER_S * 2} too long",
        wait_seconds=0,
    )
    sid = started["session_id"]

    async def decided() -> bool:
        rows = world.call_statuses(sid)
        return bool(rows) and rows[0][1] not in ("pending", "running")

    await eventually(decided, "the durable_wait call to be started or refused")
    assert world.call_statuses(sid) == [("durable_wait", "failed")]
    settled = await call(world.client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    assert settled["last_turn"]["status"] == "answered"
    assert f"duration_seconds may be at most {MAX_TIMER_S}" in settled["last_turn"]["answer"]


async def test_cancelling_a_durable_wait_ends_the_turn_at_once(world: World) -> None:
    started = await call(
        world.client, "start_session", agent="worker", message="/wait 50 a long pause", wait_seconds=0
    )
    sid = started["session_id"]

    async def timer_set() -> bool:
        return world.call_statuses(sid) == [("durable_wait", "waiting_for_timer")]

    await eventually(timer_set, "the timer to be set")
    cancelled = await call(world.client, "cancel_turn", session_id=sid)
    assert cancelled["status"] == "cancelled", cancelled
    assert world.call_statuses(sid) == [("durable_wait", "cancelled")]
    snapshot = await call(world.client, "get_session", session_id=sid)
    assert snapshot["status"] == "idle"


# ------------------------------------------------------------------ refused decisions change nothing


async def test_wrong_interrupt_ids_and_answers_are_refused_and_change_nothing(world: World) -> None:
    first = await park(world, '/tool fixture__bare {"text": "refusals"}')
    other = await park(world, '/tool fixture__bare {"text": "other session"}')
    question = await park(world, "/ask Pick one | red | blue")
    sid, iid = first["session_id"], first["pending"][0]["id"]
    other_iid = other["pending"][0]["id"]
    qsid, qid = question["session_id"], question["pending"][0]["id"]
    before = {s: world.interrupts(s) for s in (sid, other["session_id"], qsid)}

    async def refused(tool: str, **arguments: Any) -> str:
        return await call_error(world.client, tool, wait_seconds=0, **arguments)

    malformed = await refused(
        "approve", session_id=sid, decisions=[{"interrupt_id": "nope", "approved": True}]
    )
    assert "No interrupt 'nope'" in malformed and "int_" in malformed
    unknown = await refused(
        "approve", session_id=sid, decisions=[{"interrupt_id": UNKNOWN_INTERRUPT, "approved": True}]
    )
    assert UNKNOWN_INTERRUPT in unknown and "get_session" in unknown
    foreign = await refused(
        "approve", session_id=sid, decisions=[{"interrupt_id": other_iid, "approved": True}]
    )
    assert f"No interrupt '{other_iid}' in session {sid}" in foreign
    mixed = await refused(
        "approve",
        session_id=sid,
        decisions=[
            {"interrupt_id": iid, "approved": True},
            {"interrupt_id": UNKNOWN_INTERRUPT, "approved": True},
        ],
    )
    assert UNKNOWN_INTERRUPT in mixed, "one bad decision refuses the whole call"
    wrong_kind = await refused(
        "approve", session_id=qsid, decisions=[{"interrupt_id": qid, "approved": True}]
    )
    assert "answer_question" in wrong_kind
    not_a_question = await refused("answer_question", session_id=sid, interrupt_id=iid, answer="yes")
    assert "approve" in not_a_question
    outside = await refused("answer_question", session_id=qsid, interrupt_id=qid, answer="green")
    assert "must be one of: 'red', 'blue'" in outside
    empty = await refused("answer_question", session_id=qsid, interrupt_id=qid, answer="  ")
    assert "'answer'" in empty
    both = await refused("answer_question", session_id=qsid, interrupt_id=qid, answer="red", decline=True)
    assert "not both" in both

    for session_id, rows in before.items():
        assert world.interrupts(session_id) == rows, "a refused decision changed nothing"
        assert all(status == "pending" for _, status, _ in rows)
    assert world.call_statuses(sid) == [("fixture__bare", "pending_approval")]
    assert world.runs("bare", text="refusals") == 0
    assert world.runs("bare", text="other session") == 0
    snapshot = await call(world.client, "get_session", session_id=sid)
    assert snapshot["status"] == "waiting_for_input" and [p["id"] for p in snapshot["pending"]] == [iid]


async def test_a_repeated_decision_succeeds_as_already_resolved_and_a_contrary_one_is_refused(
    world: World,
) -> None:
    outcome = await park(world, '/tool fixture__bare {"text": "decide twice"}')
    sid, iid = outcome["session_id"], outcome["pending"][0]["id"]
    decision = {"interrupt_id": iid, "approved": True}
    first = await call(world.client, "approve", session_id=sid, decisions=[decision])
    assert first["status"] == "answered" and first["notes"] == []

    again = await call(world.client, "approve", session_id=sid, decisions=[decision])
    assert any("already resolved" in note for note in again["notes"]), again["notes"]
    assert again["status"] == "answered" and again["turn_id"] == first["turn_id"]
    resolved = world.interrupts(sid)
    assert resolved == [(iid, "approved", "caller")]

    contrary = await call_error(
        world.client,
        "approve",
        session_id=sid,
        decisions=[{"interrupt_id": iid, "approved": False, "reason": "changed my mind"}],
    )
    assert "already resolved: approved" in contrary and "first decision stands" in contrary
    assert world.interrupts(sid) == resolved
    assert world.runs("bare", text="decide twice") == 1


async def test_an_answer_is_final_and_a_different_answer_is_refused(world: World) -> None:
    outcome = await park(world, "/ask Ship it? | yes | no")
    sid, qid = outcome["session_id"], outcome["pending"][0]["id"]
    await call(world.client, "answer_question", session_id=sid, interrupt_id=qid, answer="yes")
    again = await call(world.client, "answer_question", session_id=sid, interrupt_id=qid, answer="yes")
    assert any("already resolved" in note for note in again["notes"]), again["notes"]
    different = await call_error(
        world.client, "answer_question", session_id=sid, interrupt_id=qid, answer="no"
    )
    assert "answered 'yes'" in different
    declined = await call_error(
        world.client, "answer_question", session_id=sid, interrupt_id=qid, decline=True
    )
    assert "answered 'yes'" in declined
    assert world.interrupts(sid) == [(qid, "answered", "caller")]


# ------------------------------------------------------------------ cancelling and queueing


async def test_cancelling_a_turn_that_waits_for_approval_never_runs_the_tool(world: World) -> None:
    outcome = await park(world, '/tool fixture__append_note {"note": "cancelled"}')
    sid, iid = outcome["session_id"], outcome["pending"][0]["id"]
    cancelled = await call(world.client, "cancel_turn", session_id=sid)
    assert cancelled["status"] == "cancelled", cancelled
    assert cancelled["turn_id"] == outcome["turn_id"]
    assert _calls(cancelled)["fixture__append_note"]["status"] == "cancelled"
    snapshot = await call(world.client, "get_session", session_id=sid)
    assert snapshot["status"] == "idle" and snapshot["pending"] == []

    stale = await call_error(
        world.client, "approve", session_id=sid, decisions=[{"interrupt_id": iid, "approved": True}]
    )
    assert "no longer pending" in stale
    assert world.interrupts(sid) == [(iid, "cancelled", "turn_end")]
    assert world.runs("append_note", note="cancelled") == 0
    follow_up = await call(world.client, "send_message", session_id=sid, message="still there?")
    assert follow_up["answer"] == "You said: still there? (message 2 of this session)"


async def test_a_message_sent_while_a_turn_waits_is_queued_and_answered_after_it(world: World) -> None:
    outcome = await park(world, '/tool fixture__bare {"text": "queue behind"}')
    sid, iid = outcome["session_id"], outcome["pending"][0]["id"]
    queued = await call(world.client, "send_message", session_id=sid, message="next please", wait_seconds=0)
    assert queued["status"] == "running" and queued["queued_message_id"]
    snapshot = await call(world.client, "get_session", session_id=sid)
    assert snapshot["status"] == "waiting_for_input"
    assert [q["message"] for q in snapshot["queued_messages"]] == ["next please"]

    resumed = await call(
        world.client, "approve", session_id=sid, decisions=[{"interrupt_id": iid, "approved": True}]
    )
    assert resumed["status"] == "answered" and resumed["turn_id"] == outcome["turn_id"]
    assert "bare queue behind" in resumed["answer"]
    settled = await call(world.client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    assert settled["status"] == "idle" and settled["queued_messages"] == []
    assert settled["last_turn"]["answer"] == "You said: next please (message 2 of this session)"


async def test_closing_a_session_that_waits_for_approval_never_runs_the_tool(world: World) -> None:
    outcome = await park(world, '/tool fixture__append_note {"note": "closed"}')
    sid, iid = outcome["session_id"], outcome["pending"][0]["id"]
    closed = await call(world.client, "close_session", session_id=sid)
    assert closed["status"] == "closed"
    snapshot = await call(world.client, "get_session", session_id=sid)
    assert snapshot["pending"] == [] and snapshot["last_turn"]["status"] == "cancelled"
    assert world.interrupts(sid) == [(iid, "cancelled", "turn_end")]
    assert world.runs("append_note", note="closed") == 0


# ------------------------------------------------------------------ deadlines


async def _rests(world: World, session_id: str) -> dict[str, Any]:
    snapshot: dict[str, Any] = {}

    async def answered() -> bool:
        nonlocal snapshot
        snapshot = await call(world.client, "get_session", session_id=session_id)
        return bool(snapshot["status"] == "idle")

    await eventually(answered, f"session {session_id} to rest")
    return snapshot


async def test_an_approval_nobody_decides_is_rejected_at_its_deadline(world: World) -> None:
    started = await call(
        world.client, "start_session", agent="hasty", message='/tool fixture__bare {"text": "too late"}'
    )
    sid = started["session_id"]
    snapshot = await _rests(world, sid)
    last = snapshot["last_turn"]
    assert last["status"] == "answered"
    assert _calls(last)["fixture__bare"]["status"] == "rejected"
    assert "No one approved this call before its deadline" in last["answer"]
    [(iid, status, by)] = world.interrupts(sid)
    assert (status, by) == ("expired", "deadline")
    [(created, deadline)] = db_rows(
        world.db, "SELECT created_at, deadline FROM interrupts WHERE id = ?", (iid,)
    )
    assert deadline == pytest.approx(created + 0.5)
    assert world.runs("bare", text="too late") == 0
    late = await call_error(
        world.client, "approve", session_id=sid, decisions=[{"interrupt_id": iid, "approved": True}]
    )
    assert "already resolved" in late
    assert world.runs("bare", text="too late") == 0


async def test_a_question_nobody_answers_goes_back_unanswered_at_its_deadline(world: World) -> None:
    started = await call(world.client, "start_session", agent="hasty", message="/ask Still there? | yes | no")
    snapshot = await _rests(world, started["session_id"])
    last = snapshot["last_turn"]
    assert last["status"] == "answered"
    assert "The question was not answered before its deadline." in last["answer"]
    [(qid, status, by)] = world.interrupts(started["session_id"])
    assert (status, by) == ("expired", "deadline")
    late = await call_error(
        world.client, "answer_question", session_id=started["session_id"], interrupt_id=qid, answer="yes"
    )
    assert "expired at its deadline" in late


async def test_a_late_decision_on_an_expired_approval_is_refused_naming_the_deadline(world: World) -> None:
    started = await call(
        world.client, "start_session", agent="hasty", message='/tool fixture__bare {"text": "expired"}'
    )
    sid = started["session_id"]
    await _rests(world, sid)
    [(iid, _, _)] = world.interrupts(sid)
    late = await call_error(
        world.client, "approve", session_id=sid, decisions=[{"interrupt_id": iid, "approved": True}]
    )
    assert "deadline" in late, late


# ------------------------------------------------------------------ elicitation over streamable HTTP


async def test_a_person_approves_through_elicitation_inside_one_blocking_call_over_http(world: World) -> None:
    person = Person.accepting({"decision": "approve"})
    async with world.person_client(person) as client:
        sid = (await call(client, "start_session", agent="worker"))["session_id"]
        outcome = await call(
            client, "send_message", session_id=sid, message='/tool fixture__bare {"text": "asked"}'
        )
    assert outcome["status"] == "answered", outcome
    assert "bare asked" in outcome["answer"]
    assert world.runs("bare", text="asked") == 1
    [asked] = person.asked
    assert isinstance(asked, types.ElicitRequestFormParams)
    assert "fixture__bare" in asked.message
    assert asked.requested_schema["properties"]["decision"]["enum"] == ["approve", "deny"]
    assert [(s, by) for _, s, by in world.interrupts(sid)] == [("approved", "elicitation")]


async def test_a_person_denies_and_answers_through_elicitation(world: World) -> None:
    def reply(params: types.ElicitRequestParams) -> types.ElicitResult:
        schema = params.requested_schema if isinstance(params, types.ElicitRequestFormParams) else {}
        if "decision" in schema["properties"]:
            return types.ElicitResult(action="accept", content={"decision": "deny", "reason": "too risky"})
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    person = Person(reply)
    async with world.person_client(person) as client:
        denied = await call(
            client, "start_session", agent="worker", message='/tool fixture__append_note {"note": "denied"}'
        )
        answered = await call(client, "start_session", agent="worker", message="/ask Colour? | red | blue")
    assert denied["status"] == "answered"
    assert "A person declined this call: too risky" in denied["answer"]
    assert world.runs("append_note", note="denied") == 0
    assert answered["status"] == "answered"
    assert "The user answered: blue" in answered["answer"]
    assert len(person.asked) == 2


async def test_a_dismissed_elicitation_leaves_the_call_pending(world: World) -> None:
    person = Person.dismissing()
    async with world.person_client(person) as client:
        outcome = await call(
            client, "start_session", agent="worker", message='/tool fixture__bare {"text": "dismissed"}'
        )
    assert outcome["status"] == "waiting_for_input", outcome
    assert len(person.asked) == 1
    sid, iid = outcome["session_id"], outcome["pending"][0]["id"]
    assert world.interrupts(sid) == [(iid, "pending", None)]
    assert world.runs("bare", text="dismissed") == 0
    resumed = await call(
        world.client, "approve", session_id=sid, decisions=[{"interrupt_id": iid, "approved": True}]
    )
    assert resumed["status"] == "answered" and world.runs("bare", text="dismissed") == 1


async def test_a_person_approves_for_a_human_only_agent_through_elicitation(world: World) -> None:
    person = Person.accepting({"decision": "approve"})
    async with world.person_client(person) as client:
        outcome = await call(
            client,
            "start_session",
            agent="guarded",
            message='/tool fixture__bare {"text": "person said yes"}',
        )
    assert outcome["status"] == "answered", outcome
    assert world.runs("bare", text="person said yes") == 1
    assert [(s, by) for _, s, by in world.interrupts(outcome["session_id"])] == [("approved", "elicitation")]


async def test_a_client_that_never_answers_the_prompt_gets_its_result_at_wait_seconds(world: World) -> None:
    async def never(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with world.person_client(never) as client:
        with anyio.fail_after(TEST_DEADLINE_S):
            outcome = await call(
                client,
                "start_session",
                agent="worker",
                message='/tool fixture__bare {"text": "unanswered prompt"}',
                wait_seconds=1,
            )
        assert outcome["status"] == "waiting_for_input", outcome
        sid, iid = outcome["session_id"], outcome["pending"][0]["id"]
        assert world.interrupts(sid) == [(iid, "pending", None)]
        follow = await call(client, "get_session", session_id=sid)
        assert follow["status"] == "waiting_for_input"
    resumed = await call(
        world.client, "approve", session_id=sid, decisions=[{"interrupt_id": iid, "approved": True}]
    )
    assert resumed["status"] == "answered" and world.runs("bare", text="unanswered prompt") == 1


async def test_an_elicited_answer_outside_the_choices_is_not_accepted(world: World) -> None:
    person = Person.accepting({"answer": "green"})
    async with world.person_client(person) as client:
        outcome = await call(client, "start_session", agent="worker", message="/ask Colour? | red | blue")
    assert person.asked, "the question was put to the person"
    assert "The user answered: green" not in (outcome["answer"] or ""), outcome
    assert outcome["status"] == "waiting_for_input", outcome
    assert [s for _, s, _ in world.interrupts(outcome["session_id"])] == ["pending"]


# ------------------------------------------------------------------ parking holds nothing


async def test_twenty_parked_sessions_hold_no_running_turn_and_all_resume(world: World) -> None:
    parked: dict[int, dict[str, Any]] = {}

    async def start(n: int) -> None:
        parked[n] = await call(
            world.client,
            "start_session",
            agent="worker",
            message=f'/tool fixture__bare {{"text": "parked {n}"}}',
        )

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(start, n)
    assert {o["status"] for o in parked.values()} == {"waiting_for_input"}

    async def nothing_running() -> bool:
        return bool((await world.health())["running_turns"] == 0)

    await eventually(nothing_running, "/healthz to show no running turn once all are parked")
    sids = tuple(o["session_id"] for o in parked.values())
    marks = ",".join("?" * len(sids))
    leased = db_rows(
        world.db, f"SELECT COUNT(*) FROM sessions WHERE id IN ({marks}) AND lease_owner IS NOT NULL", sids
    )
    assert leased == [(0,)], "a parked session holds no lease"

    resumed: dict[int, dict[str, Any]] = {}

    async def approve(n: int) -> None:
        outcome = parked[n]
        resumed[n] = await call(
            world.client,
            "approve",
            session_id=outcome["session_id"],
            decisions=[{"interrupt_id": outcome["pending"][0]["id"], "approved": True}],
        )

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(approve, n)
    for n in range(20):
        assert resumed[n]["status"] == "answered", resumed[n]
        assert f"bare parked {n}" in resumed[n]["answer"]
        assert world.runs("bare", text=f"parked {n}") == 1
