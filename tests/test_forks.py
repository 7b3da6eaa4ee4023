"""fork_session through the real surfaces, in-process on the composition root of `parley serve`:
a fork continues from the end of the turn it was made at (on both databases), its turns may be
pinned to an agent version, it shares the original's attachments and takes its plan as it was
then, it is refused clearly (and nothing changes) when it cannot be made, and get_session shows
the lineage both ways. /v1 answers POST /v1/sessions/{id}/fork with 201 and the summary."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from parley.testing import HeldModel, call, call_error, eventually, parley_app
from tests.support import Database, tokens_auth

pytestmark = pytest.mark.anyio

PIXEL_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PIXEL = base64.b64decode(PIXEL_B64)
PIXEL_SHA = hashlib.sha256(PIXEL).hexdigest()


async def five_turns(client: Client, agent: str = "demo") -> str:
    started = await call(client, "start_session", agent=agent, message="one")
    sid = started["session_id"]
    for word in ("two", "three", "four", "five"):
        answered = await call(client, "send_message", session_id=sid, message=word)
        assert answered["status"] == "answered"
    return str(sid)


async def whole(client: Client, sid: str) -> dict[str, Any]:
    return await call(client, "get_session", session_id=sid, messages_from=1, messages_limit=200)


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_a_fork_at_turn_two_of_five_continues_from_turn_two(tmp_path: Path, database: Database) -> None:
    config = {"storage": database.storage()}
    async with parley_app(config, db=database.db_arg, directory=tmp_path) as parley, parley.mcp() as client:
        sid = await five_turns(client)
        before = await whole(client, sid)
        forked = await call(client, "fork_session", session_id=sid, at_turn=2, title="What if")
        fork_id = forked["session_id"]
        at_rest = await whole(client, fork_id)
        answered = await call(client, "send_message", session_id=fork_id, message="six")
        after_fork = await whole(client, fork_id)
        original = await whole(client, sid)
        listed = await call(client, "list_sessions")

    assert forked["forked_from"] == {"session_id": sid, "turn": 2}
    assert (forked["status"], forked["turn_count"], forked["title"]) == ("idle", 2, "What if")
    # The fork holds the first two turns' messages, renumbered from 1, and nothing of later turns.
    kept = [m for m in before["messages"] if m["seq"] <= at_rest["total_messages"]]
    assert [(m["role"], m["text"]) for m in at_rest["messages"]] == [(m["role"], m["text"]) for m in kept]
    assert [m["seq"] for m in at_rest["messages"]] == list(range(1, at_rest["total_messages"] + 1))
    assert [m["text"] for m in at_rest["messages"] if m["role"] == "user"] == ["one", "two"]
    assert [t["seq"] for t in at_rest["turns"]] == [1, 2]
    assert at_rest["pending"] == [] and at_rest["queued_messages"] == []
    # It continues from turn 2's state: the demo model counts the user messages it sees.
    assert "You said: six (message 3 of this session)" in answered["answer"]
    assert after_fork["turn_count"] == 3 and [t["seq"] for t in after_fork["turns"]] == [1, 2, 3]
    # The original is unchanged, and names its fork.
    assert original["turn_count"] == 5 and original["messages"] == before["messages"]
    assert [f["session_id"] for f in original["forks"]] == [fork_id]
    assert original["forked_from"] is None
    assert after_fork["forked_from"] == {"session_id": sid, "turn": 2}
    summaries = {s["session_id"]: s for s in listed["sessions"]}
    assert summaries[fork_id]["forked_from"] == {"session_id": sid, "turn": 2}


async def test_a_fork_at_turn_zero_is_empty_and_its_next_message_is_the_first(tmp_path: Path) -> None:
    async with parley_app(directory=tmp_path) as parley, parley.mcp() as client:
        sid = (await call(client, "start_session", agent="demo", message="hello"))["session_id"]
        forked = await call(client, "fork_session", session_id=sid, at_turn=0)
        empty = await whole(client, forked["session_id"])
        answered = await call(client, "send_message", session_id=forked["session_id"], message="again")

    assert (forked["turn_count"], empty["total_messages"], empty["messages"]) == (0, 0, [])
    assert "message 1 of this session" in answered["answer"]


async def test_a_pinned_fork_runs_every_turn_on_its_version_after_the_agent_changed(tmp_path: Path) -> None:
    agents = {"asker": {"description": "Version one.", "instructions": "One.", "tools": ["ask_user"]}}
    config = {"runtime": {"agent_reload_s": 0.05}}
    async with parley_app(config, agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
        sid = (await call(client, "start_session", agent="asker", message="hi"))["session_id"]
        v1 = (await whole(client, sid))["turns"][0]["agent_version"]
        agent_file = tmp_path / "configs" / "agents" / "asker.yaml"
        agent_file.write_text(
            agent_file.read_text().replace("One.", "Two.").replace("ask_user", "write_todos")
        )

        async def reloaded() -> bool:
            listed = {a["name"]: a for a in (await call(client, "list_agents"))["agents"]}
            return bool(listed["asker"]["version"] != v1)

        await eventually(reloaded, "the changed agent file to be served")
        pinned = await call(client, "fork_session", session_id=sid, at_turn=1, agent_version=v1)
        live = await call(client, "fork_session", session_id=sid, at_turn=1)
        for fork in (pinned, live):
            for word in ("a", "b"):
                await call(client, "send_message", session_id=fork["session_id"], message=word)
        pinned_view = await whole(client, pinned["session_id"])
        live_view = await whole(client, live["session_id"])
        unknown = await call_error(
            client, "fork_session", session_id=sid, at_turn=1, agent_version="0123abcd"
        )

    assert [t["agent_version"] for t in pinned_view["turns"]] == [v1, v1, v1]
    assert pinned_view["agent_version_pin"] == v1
    assert pinned_view["tools"] == ["ask_user"], "get_session shows the pinned definition's tools"
    assert live_view["tools"] == ["write_todos"]
    v2 = live_view["turns"][1]["agent_version"]
    assert v2 != v1 and [t["agent_version"] for t in live_view["turns"]] == [v1, v2, v2]
    assert live_view["agent_version_pin"] is None
    assert "agent_version" in unknown and "is not a version of agent 'asker'" in unknown


async def test_a_fork_shares_the_attachments_of_the_turns_it_keeps(tmp_path: Path) -> None:
    image = {"type": "image", "data": PIXEL_B64, "mimeType": "image/png", "name": "pixel.png"}
    async with parley_app(directory=tmp_path) as parley, parley.mcp() as client:
        started = await call(client, "start_session", agent="demo", message="see this", attachments=[image])
        sid = started["session_id"]
        await call(client, "send_message", session_id=sid, message="and then")
        forked = await call(client, "fork_session", session_id=sid, at_turn=1)
        view = await whole(client, forked["session_id"])
        empty = await call(client, "fork_session", session_id=sid, at_turn=0)
        http = await parley.http()
        async with http.client() as web:
            fetched = await web.get(f"/v1/sessions/{forked['session_id']}/attachments/{PIXEL_SHA}")
            not_shared = await web.get(f"/v1/sessions/{empty['session_id']}/attachments/{PIXEL_SHA}")
        blobs = await parley.app.store.attachment_data([PIXEL_SHA])

    first = view["messages"][0]
    assert first["role"] == "user" and [a["sha256"] for a in first["attachments"]] == [PIXEL_SHA]
    assert fetched.status_code == 200 and fetched.content == PIXEL
    assert not_shared.status_code == 404
    assert list(blobs) == [PIXEL_SHA], "the bytes are stored once, shared by hash"


def todos_line(*items: str) -> str:
    return "/tool write_todos " + json.dumps({"todos": [{"content": item} for item in items]})


async def test_a_fork_takes_the_plan_as_it_was_at_the_end_of_its_turn(tmp_path: Path) -> None:
    agents = {"planner": {"tools": ["write_todos", "ask_user"], "plan_mode": True}}
    async with parley_app(agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
        first = await call(client, "start_session", agent="planner", message=todos_line("back up", "migrate"))
        sid = first["session_id"]
        # The second turn still plans (a draft waits), and revises the plan.
        await call(client, "send_message", session_id=sid, message=todos_line("back up twice", "migrate"))
        executed = await call(client, "execute_plan", session_id=sid, revision=2)
        at = {turn: await call(client, "fork_session", session_id=sid, at_turn=turn) for turn in (0, 1, 2, 3)}
        views = {turn: await whole(client, fork["session_id"]) for turn, fork in at.items()}
        approved_in_fork = await call(client, "execute_plan", session_id=at[2]["session_id"], revision=2)

    assert executed["plan"]["status"] == "completed"
    assert views[0]["plan"] is None
    one = views[1]["plan"]
    assert (one["status"], one["revision"]) == ("draft", 1)
    assert [t["content"] for t in one["todos"]] == ["back up", "migrate"]
    two = views[2]["plan"]
    assert (two["status"], two["revision"]) == ("draft", 2)
    assert [t["content"] for t in two["todos"]] == ["back up twice", "migrate"]
    assert views[3]["plan"]["status"] == "completed"
    # The fork has approved no revision: the original's approval does not carry over.
    assert approved_in_fork["status"] == "answered" and approved_in_fork["mode"] == "executing"


async def test_refusals_name_the_fix_and_change_nothing(tmp_path: Path) -> None:
    model = HeldModel()
    held = model.hold("slow")
    async with parley_app(directory=tmp_path, model=model) as parley, parley.mcp() as client:
        sid = (await call(client, "start_session", agent="demo", message="hello"))["session_id"]
        too_far = await call_error(client, "fork_session", session_id=sid, at_turn=2)
        unknown = await call_error(client, "fork_session", session_id="ses_" + "0" * 32, at_turn=0)
        await call(client, "send_message", session_id=sid, message="slow one", wait_seconds=0)
        await held.wait_held()
        running = await call_error(client, "fork_session", session_id=sid, at_turn=2)
        ended = await call(client, "fork_session", session_id=sid, at_turn=1)
        held.release()
        await call(client, "get_session", session_id=sid, wait_seconds=10)
        original = await whole(client, sid)
        listed = await call(client, "list_sessions")

    assert "at_turn" in too_far and "from 0 (before the first) to 1" in too_far
    assert "No session" in unknown
    assert "turn 2" in running and "still running" in running and "0-1" in running
    assert ended["turn_count"] == 1
    assert original["turn_count"] == 2 and [f["session_id"] for f in original["forks"]] == [
        ended["session_id"]
    ]
    assert len(listed["sessions"]) == 2, "only the one fork that could be made was stored"


async def test_only_a_session_you_can_read_can_be_forked_and_the_fork_is_yours(tmp_path: Path) -> None:
    tokens = {name: "parley_" + secrets.token_urlsafe(32) for name in ("alice", "bob")}
    async with parley_app({"auth": tokens_auth(tokens)}, directory=tmp_path) as parley:
        http = await parley.http()
        async with http.client(tokens["alice"]) as alice, http.client(tokens["bob"]) as bob:
            started = await alice.post("/v1/sessions", json={"agent": "demo", "message": "mine"})
            sid = started.json()["session_id"]
            foreign = await bob.post(f"/v1/sessions/{sid}/fork", json={"at_turn": 1})
            forked = await alice.post(
                f"/v1/sessions/{sid}/fork", json={"at_turn": 1, "title": "Alice's fork"}
            )
            bad = await alice.post(f"/v1/sessions/{sid}/fork", json={"at_turn": 7})
            wrong_type = await alice.post(f"/v1/sessions/{sid}/fork", json={"at_turn": "1"})
            fork_id = forked.json()["session_id"]
            fork_view = await alice.get(f"/v1/sessions/{fork_id}")
            seen_by_bob = await bob.get(f"/v1/sessions/{fork_id}")
            original = await alice.get(f"/v1/sessions/{sid}")

    assert foreign.status_code == 404 and "session-not-found" in foreign.json()["type"]
    assert forked.status_code == 201
    body = forked.json()
    assert (body["owner"], body["title"], body["forked_from"]) == (
        "alice",
        "Alice's fork",
        {"session_id": sid, "turn": 1},
    )
    assert bad.status_code == 400 and bad.json()["field"] == "at_turn"
    assert wrong_type.status_code == 400
    assert fork_view.json()["forked_from"] == {"session_id": sid, "turn": 1}
    assert seen_by_bob.status_code == 404
    assert [f["session_id"] for f in original.json()["forks"]] == [fork_id]


async def test_an_audit_entry_records_each_fork(tmp_path: Path) -> None:
    async with parley_app(directory=tmp_path) as parley, parley.mcp() as client:
        sid = (await call(client, "start_session", agent="demo", message="hello"))["session_id"]
        forked = await call(client, "fork_session", session_id=sid, at_turn=1)
        trail = await parley.app.store.list_audit(forked["session_id"], None, None, 10)

    assert [(e.action, e.target, e.detail.get("at_turn")) for e in trail] == [("fork", sid, 1)]


# ---------------------------------------------------------------------------- the rule itself
# parley/core/forks.py, on records as the store reads them: what the surfaces above cannot easily
# produce (a compaction summary, an event of no turn, a message of no kept turn).


def test_the_rule_keeps_summaries_within_the_turns_and_renumbers_what_it_keeps() -> None:
    from dataclasses import replace

    from parley.core import forks
    from parley.core.ids import SessionId, TurnId
    from parley.core.records import EventRecord, MessageRecord, SessionRecord, SummaryRecord, TurnRecord

    sid, fid = SessionId("ses_" + "a" * 32), SessionId("ses_" + "b" * 32)

    def turn(seq: int) -> TurnRecord:
        return TurnRecord(
            id=TurnId(f"turn_{seq}"), session_id=sid, seq=seq, status="answered", queued_message_id=None,
            started_at=1.0, ended_at=2.0, answer="ok", error=None, model_calls=1, input_tokens=10 * seq,
            output_tokens=seq, settings={"model": f"m{seq}"},
        )  # fmt: skip

    def message(seq: int, turn_seq: int) -> MessageRecord:
        content = (
            {"text": f"m{seq}", "attachments": [{"sha256": "f" * 64}]} if seq == 1 else {"text": f"m{seq}"}
        )
        return MessageRecord(
            session_id=sid,
            seq=seq,
            turn_id=TurnId(f"turn_{turn_seq}"),
            role="user",
            content=content,
            created_at=1.0,
        )

    def event(seq: int, turn_seq: int | None, kind: str, **data: object) -> EventRecord:
        turn_id = TurnId(f"turn_{turn_seq}") if turn_seq else None
        return EventRecord(
            session_id=sid, seq=seq, turn_id=turn_id, kind=kind, data=dict(data), created_at=1.0
        )

    turns = [turn(1), turn(2), turn(3)]
    session = SessionRecord.new(sid, agent="demo", owner="me", kind="chat", now=1.0)
    source = forks.ForkSource(
        session=replace(session, turn_count=3),
        turns=turns,
        # The store reads only the kept turns' messages, but the rule does not rely on it.
        messages=[message(1, 1), message(3, 1), message(4, 2), message(9, 3)],
        events=[
            event(1, None, "session_created", agent="demo"),
            event(2, 1, "turn_started"),
            event(3, 1, "plan_updated", revision=1, status="draft", todos=[{"content": "a"}]),
            event(4, None, "message_queued", queued_message_id="qm_x"),
            event(5, None, "plan_updated", revision=1, status="cleared", todos=[]),
            event(6, 2, "turn_ended", status="answered"),
        ],
        summaries=[
            SummaryRecord(session_id=sid, upto_seq=3, turn_id=TurnId("turn_2"), text="s", created_at=1.0),
            SummaryRecord(session_id=sid, upto_seq=4, turn_id=TurnId("turn_3"), text="t", created_at=1.0),
        ],
        attachments=frozenset({"f" * 64, "e" * 64}),
    )
    request = forks.ForkRequest(
        at_turn=2, fork_id=fid, turn_ids=[TurnId("turn_x"), TurnId("turn_y")], owner="you", title=None,
        agent_version_pin="v1", now=5.0,
    )  # fmt: skip

    outcome, forked = forks.fork(source, request)

    assert outcome == "forked" and forked is not None
    assert [(t.id, t.seq) for t in forked.turns] == [("turn_x", 1), ("turn_y", 2)]
    assert [(m.seq, m.turn_id, m.content["text"]) for m in forked.messages] == [
        (1, "turn_x", "m1"),
        (2, "turn_x", "m3"),
        (3, "turn_y", "m4"),
    ]
    # A summary up to original message 3 covers the fork's first two; 4 is the fork's 3; the turn
    # a summary was made in is renamed, or none when the fork does not keep it.
    assert [(s.upto_seq, s.turn_id) for s in forked.summaries] == [(2, "turn_y"), (3, None)]
    assert [(e.seq, e.kind, e.turn_id) for e in forked.events] == [
        (1, "session_created", None),
        (2, "turn_started", "turn_x"),
        (3, "plan_updated", "turn_x"),
        (4, "plan_updated", None),
        (5, "turn_ended", "turn_y"),
    ]
    fork_session = forked.session
    assert (fork_session.plan_status, fork_session.plan_revision, fork_session.todos) == ("cleared", 1, [])
    assert (fork_session.owner, fork_session.status, fork_session.turn_count) == ("you", "idle", 2)
    assert (fork_session.input_tokens, fork_session.settings) == (30, {"model": "m2"})
    assert (fork_session.parent_session_id, fork_session.parent_turn, fork_session.agent_version_pin) == (
        sid,
        2,
        "v1",
    )
    assert forked.attachments == ["f" * 64]
    assert forks.fork(source, replace(request, at_turn=4)) == ("out_of_range", None)
    running = replace(source, turns=[turn(1), turn(2), replace(turn(3), status="running")])
    assert forks.fork(running, replace(request, at_turn=3)) == ("running", None)
    assert forks.fork(None, request) == ("not_found", None)
