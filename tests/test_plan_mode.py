"""Plan mode through the MCP tools, in-process on the composition root of `parley serve`: a
planning turn runs only write_todos, ask_user and tools configured as read; a person approves
one revision with execute_plan; the executing turn has every tool and keeps the statuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client

from parley.cli import main
from parley.sdk_compat import InMemoryTransport
from parley.testing import (
    CALL_DEADLINE_S,
    HeldModel,
    ToolServer,
    call,
    call_error,
    eventually,
    parley_app,
    write_config,
)
from tests.support import Database, db_rows

pytestmark = pytest.mark.anyio


def ops_tools() -> ToolServer:
    """A server with one tool the configuration calls read, one whose own annotation says so
    (untrusted for planning), and one that writes."""
    ops = ToolServer("ops")

    @ops.tool()
    async def inspect(target: str) -> str:
        """Look at a target."""
        return f"{target}: 3 tables"

    @ops.tool(read_only=True)
    async def peek(target: str) -> str:
        """Look at a target (its annotation says read-only)."""
        return f"{target}: peeked"

    @ops.tool(destructive=False, idempotent=True)
    async def migrate(target: str) -> str:
        """Change a target."""
        return f"{target}: migrated"

    return ops


def planner(**extra: Any) -> dict[str, Any]:
    return {
        "tools": ["write_todos", "ask_user"],
        "plan_mode": True,
        "mcp_servers": ["ops"],
        **extra,
    }


def config(ops: ToolServer) -> dict[str, Any]:
    return {"mcp_servers": {"ops": {**ops.entry, "tools": {"inspect": {"effect": "read"}}}}}


def todos_line(*items: str) -> str:
    return "/tool write_todos " + json.dumps({"todos": [{"content": item} for item in items]})


async def test_a_planning_turn_runs_configured_reads_and_refuses_everything_else(tmp_path: Path) -> None:
    ops = ops_tools()
    message = "\n".join(
        [
            '/tool ops__inspect {"target": "db"}',
            '/tool ops__peek {"target": "db"}',
            '/tool ops__migrate {"target": "db"}',
            todos_line("back up db", '/tool ops__migrate {"target": "db"}'),
        ]
    )
    async with (
        ops.serve(),
        parley_app(config(ops), agents={"planner": planner()}, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        planned = await call(client, "start_session", agent="planner", message=message)
        session = await call(client, "get_session", session_id=planned["session_id"])

    assert planned["status"] == "answered", planned
    assert planned["mode"] == "planning"
    statuses = {c["tool"]: c["status"] for c in planned["tool_calls"]}
    assert statuses == {
        "ops__inspect": "succeeded",
        "ops__peek": "failed",
        "ops__migrate": "failed",
        "write_todos": "succeeded",
    }
    assert [c.tool for c in ops.calls] == ["inspect"], "only the tool configured as read ran"
    refused = next(m for m in session["messages"] if m["role"] == "tool" and "planning turn" in m["text"])
    assert refused["is_error"]
    assert planned["plan"] == {
        "status": "draft",
        "revision": 1,
        "todos": [
            {"content": "back up db", "status": "pending"},
            {"content": '/tool ops__migrate {"target": "db"}', "status": "pending"},
        ],
    }
    assert session["plan"]["status"] == "draft"


async def test_an_approved_plan_runs_with_every_tool_and_completes(tmp_path: Path) -> None:
    ops = ops_tools()
    plan = todos_line("back up db", '/tool ops__migrate {"target": "db"}')
    async with (
        ops.serve(),
        parley_app(config(ops), agents={"planner": planner()}, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        planned = await call(client, "start_session", agent="planner", message=plan)
        sid = planned["session_id"]
        assert ops.ran("migrate") == []
        done = await call(client, "execute_plan", session_id=sid, revision=1)
        listed = await call(client, "list_sessions")
        again = await call_error(client, "execute_plan", session_id=sid, revision=2)

    assert done["status"] == "answered", done
    assert done["mode"] == "executing"
    assert [c.arguments for c in ops.ran("migrate")] == [{"target": "db"}]
    assert done["plan"]["status"] == "completed" and done["plan"]["revision"] == 2
    assert all(t["status"] == "completed" for t in done["plan"]["todos"])
    [summary] = listed["sessions"]
    assert summary["plan_status"] == "completed" and summary["plan_revision"] == 2
    assert "no plan to approve" in again


async def test_a_stale_revision_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    async with (
        parley_app(agents={"planner": planner(mcp_servers=[])}, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        first = await call(client, "start_session", agent="planner", message=todos_line("one"))
        sid = first["session_id"]
        # Feedback on a draft plans again: revision 2.
        second = await call(client, "send_message", session_id=sid, message=todos_line("one", "two"))
        stale = await call_error(client, "execute_plan", session_id=sid, revision=1)
        after = await call(client, "get_session", session_id=sid)

    assert second["mode"] == "planning" and second["plan"]["revision"] == 2
    assert "revision 2, not 1" in stale and "Nothing was changed" in stale
    assert after["plan"]["status"] == "draft" and after["turn_count"] == 2


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_of_two_concurrent_approvals_exactly_one_wins(tmp_path: Path, database: Database) -> None:
    agents = {"planner": planner(mcp_servers=[])}
    config = {"storage": database.storage()}
    async with (
        parley_app(config, db=database.db_arg, agents=agents, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        first = await call(client, "start_session", agent="planner", message=todos_line("one"))
        sid = first["session_id"]
        results: list[str] = []

        async def approve() -> None:
            try:
                outcome = await call(client, "execute_plan", session_id=sid, revision=1)
                results.append(outcome["status"])
            except AssertionError as exc:
                results.append(f"refused: {exc}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(approve)
            tg.start_soon(approve)
        after = await call(client, "get_session", session_id=sid)

    assert sorted(r.split(":")[0] for r in results) == ["answered", "refused"], results
    assert after["turn_count"] == 2, "one executing turn ran"


async def test_discard_drops_the_draft_and_the_next_message_is_ordinary(tmp_path: Path) -> None:
    async with (
        parley_app(agents={"planner": planner(mcp_servers=[])}, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        first = await call(client, "start_session", agent="planner", message=todos_line("one"))
        sid = first["session_id"]
        discarded = await call(client, "discard_plan", session_id=sid)
        again = await call_error(client, "discard_plan", session_id=sid)
        ordinary = await call(client, "send_message", session_id=sid, message="hello")

    assert discarded["plan_status"] == "cleared"
    assert "no draft to discard" in again
    assert ordinary["mode"] is None and ordinary["status"] == "answered"


async def test_plan_needs_an_agent_with_plan_mode(tmp_path: Path) -> None:
    async with parley_app(directory=tmp_path) as parley, parley.mcp() as client:
        refused = await call_error(client, "start_session", agent="demo", message="hi", plan=True)
    assert "plan_mode: true" in refused and "plan" in refused


async def test_plan_mode_lasts_until_a_plan_is_approved_or_discarded(tmp_path: Path) -> None:
    agents = {"planner": planner(mcp_servers=[])}
    async with parley_app(agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
        asked = await call(client, "start_session", agent="planner", message="Which database?")
        sid = asked["session_id"]
        # A clarifying exchange leaves no draft, and the answer to it plans again.
        answered = await call(client, "send_message", session_id=sid, message="postgres")
        left = await call(client, "discard_plan", session_id=sid)
        ordinary = await call(client, "send_message", session_id=sid, message="thanks")
        asked_again = await call(client, "send_message", session_id=sid, message="plan it", plan=True)

    assert (asked["mode"], asked["plan"]) == ("planning", None)
    assert (answered["mode"], answered["plan"]) == ("planning", None)
    assert left["plan_status"] == "cleared"
    assert ordinary["mode"] is None
    assert asked_again["mode"] == "planning"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_that_shows_forms_approves_the_draft_in_place(mode: str, tmp_path: Path) -> None:
    """A 2025-11-25 client is asked by elicitation; a 2026-07-28 one by an input-required result."""
    asked: list[str] = []

    async def person(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    agents = {"planner": planner(mcp_servers=[])}
    async with parley_app(agents=agents, directory=tmp_path) as parley:
        transport = InMemoryTransport(parley.mcp_server)
        async with Client(transport, mode=mode, elicitation_callback=person) as client:
            done = await call(client, "start_session", agent="planner", message=todos_line("one", "two"))
            session = await call(client, "get_session", session_id=done["session_id"])

    assert len(asked) == 1 and "revision 1" in asked[0] and "1. one\n2. two" in asked[0]
    assert done["mode"] == "executing" and done["plan"]["status"] == "completed", done
    assert "approved the plan (revision 1) in your client" in done["notes"][0]
    assert session["turn_count"] == 2
    assert [d["action"] for d in session["decisions"]] == ["execute_plan"]


async def test_keeping_the_draft_in_the_client_leaves_it_for_the_tools(tmp_path: Path) -> None:
    async def person(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"decision": "keep reviewing"})

    agents = {"planner": planner(mcp_servers=[])}
    async with parley_app(agents=agents, directory=tmp_path) as parley:
        transport = InMemoryTransport(parley.mcp_server)
        async with Client(transport, mode="legacy", elicitation_callback=person) as client:
            kept = await call(client, "start_session", agent="planner", message=todos_line("one"))

    assert kept["mode"] == "planning" and kept["plan"]["status"] == "draft"
    assert "stays a draft" in kept["notes"][-1]


async def test_the_v1_endpoints_plan_approve_refuse_and_discard(tmp_path: Path) -> None:
    agents = {"planner": planner(mcp_servers=[])}
    async with parley_app(agents=agents, directory=tmp_path) as parley:
        endpoint = await parley.http()
        async with endpoint.client() as http:
            body = {"agent": "planner", "message": todos_line("one")}
            drafted = (await http.post("/v1/sessions", json=body)).json()
            sid = drafted["session_id"]
            pending = (await http.get("/v1/pending")).json()
            stale = await http.post(f"/v1/sessions/{sid}/plan/execute", json={"revision": 7})
            bad = await http.post(f"/v1/sessions/{sid}/plan/execute", json={"revision": "1"})
            done = await http.post(f"/v1/sessions/{sid}/plan/execute", json={"revision": 1})
            again = await http.post(f"/v1/sessions/{sid}/plan/execute", json={"revision": 1})
            ordinary = (
                await http.post("/v1/sessions", json={"agent": "planner", "message": "hi", "plan": False})
            ).json()
            planned = await http.post(
                f"/v1/sessions/{ordinary['session_id']}/messages",
                json={"message": todos_line("x"), "plan": True},
            )
            discarded = await http.post(f"/v1/sessions/{ordinary['session_id']}/plan/discard", json={})
            nothing = await http.post(f"/v1/sessions/{ordinary['session_id']}/plan/discard", json={})

    assert drafted["plan"] == {
        "status": "draft",
        "revision": 1,
        "todos": [{"content": "one", "status": "pending"}],
    }
    [draft] = pending["drafts"]
    assert draft["session_id"] == sid and draft["may_decide"] is True
    assert stale.status_code == 409 and stale.json()["type"].endswith("plan-refused"), stale.text
    assert "revision 1, not 7" in stale.json()["detail"]
    assert (stale.json()["reason"], stale.json()["revision"]) == ("stale", 1)
    assert bad.status_code == 400 and "revision" in bad.text
    assert done.status_code == 200 and done.json()["mode"] == "executing", done.text
    assert again.status_code == 409 and "already approved" in again.json()["detail"]
    assert ordinary["mode"] is None
    assert planned.json()["plan"]["status"] == "draft"
    assert discarded.status_code == 200 and discarded.json()["plan_status"] == "cleared"
    assert nothing.status_code == 409 and "no draft to discard" in nothing.json()["detail"]


async def test_an_executing_turn_that_was_cancelled_may_be_approved_again(tmp_path: Path) -> None:
    ops = ops_tools()
    plan = todos_line('/tool ops__migrate {"target": "db"}')
    agents = {"planner": planner()}
    async with ops.serve():
        asks = {"mcp_servers": {"ops": {**ops.entry, "tools": {"migrate": {"approval": "always"}}}}}
        async with parley_app(asks, agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
            planned = await call(client, "start_session", agent="planner", message=plan)
            sid = planned["session_id"]
            waiting = await call(client, "execute_plan", session_id=sid, revision=1)
            assert waiting["status"] == "waiting_for_input", waiting["status"]
            cancelled = await call(client, "cancel_turn", session_id=sid)
            again = await call(client, "execute_plan", session_id=sid, revision=1)
            [approval] = again["pending"]
            decision = {"interrupt_id": approval["id"], "approved": True}
            done = await call(client, "approve", session_id=sid, decisions=[decision])
            retried = await call_error(client, "execute_plan", session_id=sid, revision=1)

    assert cancelled["status"] == "cancelled"
    assert done["status"] == "answered" and done["plan"]["status"] == "completed"
    assert [c.arguments for c in ops.ran("migrate")] == [{"target": "db"}]
    assert "already approved" in retried or "no plan" in retried


async def test_an_approval_counts_against_the_approvers_fair_use(tmp_path: Path) -> None:
    agents = {"planner": planner(mcp_servers=[])}
    config = {"limits": {"messages_per_minute": 1}}
    async with parley_app(config, agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
        planned = await call(client, "start_session", agent="planner", message=todos_line("one"))
        refused = await call_error(client, "execute_plan", session_id=planned["session_id"], revision=1)
        after = await call(client, "get_session", session_id=planned["session_id"])
    assert "messages per minute" in refused or "limit" in refused.lower(), refused
    assert after["plan"]["status"] == "draft" and after["turn_count"] == 1


async def test_a_plan_mode_session_started_empty_plans_its_first_message(tmp_path: Path) -> None:
    agents = {"planner": planner(mcp_servers=[])}
    async with parley_app(agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
        empty = await call(client, "start_session", agent="planner")
        first = await call(client, "send_message", session_id=empty["session_id"], message=todos_line("a"))
        ordinary = await call(client, "start_session", agent="planner", plan=False)
        second = await call(client, "send_message", session_id=ordinary["session_id"], message="hi")
    assert first["mode"] == "planning" and first["plan"]["status"] == "draft"
    assert second["mode"] is None


def test_an_operator_approves_or_discards_a_plan_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """For an agent that takes decisions only from a person, when no client can ask one."""
    config = write_config(tmp_path, {}, {"careful": {**planner(mcp_servers=[]), "approver": "human"}})

    async def drafted() -> tuple[str, str]:
        async with parley_app(config) as parley, parley.mcp() as client:
            one = await call(client, "start_session", agent="careful", message=todos_line("one"))
            two = await call(client, "start_session", agent="careful", message=todos_line("two"))
            refused = await call_error(client, "execute_plan", session_id=one["session_id"], revision=1)
            assert "only from a person" in refused
            return str(one["session_id"]), str(two["session_id"])

    first, second = anyio.run(drafted)
    assert main(["pending", "--config", str(config)]) == 0
    listed = capsys.readouterr().out
    assert f"parley plan approve {first} 1" in listed and f"parley plan approve {second} 1" in listed
    assert main(["plan", "approve", first, "2", "--config", str(config)]) == 1
    assert "revision 1, not 2" in capsys.readouterr().err
    assert main(["plan", "approve", first, "1", "--config", str(config)]) == 0
    assert main(["plan", "discard", second, "--config", str(config)]) == 0

    async def after() -> tuple[dict[str, Any], dict[str, Any]]:
        async with parley_app(config) as parley, parley.mcp() as client:
            done = await call(client, "get_session", session_id=first, wait_seconds=CALL_DEADLINE_S / 2)
            return done, await call(client, "get_session", session_id=second)

    done, discarded = anyio.run(after)
    assert done["plan"]["status"] == "completed" and done["turn_count"] == 2, "the next server ran it"
    approvals = [d for d in done["decisions"] if d["action"] == "execute_plan" and d["outcome"] == "ok"]
    assert [d["principal"] for d in approvals] == ["cli"]
    assert discarded["plan"]["status"] == "cleared"


def plan_events(db: Path, sid: str) -> int:
    """How many executing turns approvals of the session's plans started (plan_execution_started)."""
    sql = "SELECT COUNT(*) FROM events WHERE session_id = ? AND kind = 'plan_execution_started'"
    [(count,)] = db_rows(db, sql, (sid,))
    return int(count)


def refused_approvals(session: dict[str, Any]) -> list[str]:
    """Why each of the session's refused execute_plan decisions was refused (its audit trail)."""
    return [
        d["via"] for d in session["decisions"] if d["action"] == "execute_plan" and d["outcome"] == "refused"
    ]


async def test_approving_a_plan_of_a_closed_session_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    async with (
        parley_app(agents={"planner": planner(mcp_servers=[])}, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        planned = await call(client, "start_session", agent="planner", message=todos_line("one"))
        sid = planned["session_id"]
        await call(client, "close_session", session_id=sid)
        refused = await call_error(client, "execute_plan", session_id=sid, revision=1)
        after = await call(client, "get_session", session_id=sid)

    assert f"Session {sid} is closed" in refused and "takes no more messages" in refused, refused
    assert after["status"] == "closed" and after["turn_count"] == 1
    assert after["plan"] == planned["plan"] and after["plan"]["status"] == "draft", "the draft is as it was"
    assert after["queued_messages"] == []
    assert plan_events(tmp_path / "parley.db", sid) == 0, "no executing turn was started"


async def test_approving_while_a_message_is_queued_is_refused_as_busy(tmp_path: Path) -> None:
    """A planning turn on the draft runs (held in its model call) with another message queued
    behind it: the approval is refused, the queue keeps its message, and neither turn executes."""
    model = HeldModel()
    held = model.hold("hold")
    agents = {"planner": planner(mcp_servers=[])}
    async with (
        parley_app(agents=agents, directory=tmp_path, model=model) as parley,
        parley.mcp() as client,
    ):
        planned = await call(client, "start_session", agent="planner", message=todos_line("one"))
        sid = planned["session_id"]
        await call(client, "send_message", session_id=sid, message="hold on", wait_seconds=0)
        await held.wait_held()
        queued = await call(client, "send_message", session_id=sid, message="and then?", wait_seconds=0)
        refused = await call_error(client, "execute_plan", session_id=sid, revision=1)
        during = await call(client, "get_session", session_id=sid)
        held.release()
        settled: dict[str, Any] = {}

        async def rested() -> bool:
            settled.update(await call(client, "get_session", session_id=sid))
            return settled["status"] == "idle" and not settled["queued_messages"]

        await eventually(rested, "both planning turns to run")

    assert "execute_plan refused: it is not waiting for a message" in refused, refused
    assert "Nothing was changed" in refused
    assert [m["id"] for m in during["queued_messages"]] == [queued["queued_message_id"]]
    assert during["plan"] == planned["plan"], "the draft is as it was"
    [why] = refused_approvals(during)
    assert "not waiting for a message" in why, why
    assert settled["turn_count"] == 3 and settled["last_turn"]["mode"] == "planning", "nothing executed"
    assert plan_events(tmp_path / "parley.db", sid) == 0


async def test_approving_while_an_approval_is_pending_is_refused_as_busy(tmp_path: Path) -> None:
    """The planning turn wrote its draft and waits for a person to approve a read it makes: the
    plan cannot be approved until that is decided."""
    ops = ops_tools()
    message = "\n".join([todos_line("back up db"), '/tool ops__inspect {"target": "db"}'])
    asks = {"inspect": {"effect": "read", "approval": "always"}}
    async with ops.serve():
        settings = {"mcp_servers": {"ops": {**ops.entry, "tools": asks}}}
        async with (
            parley_app(settings, agents={"planner": planner()}, directory=tmp_path) as parley,
            parley.mcp() as client,
        ):
            waiting = await call(client, "start_session", agent="planner", message=message)
            sid = waiting["session_id"]
            refused = await call_error(client, "execute_plan", session_id=sid, revision=1)
            during = await call(client, "get_session", session_id=sid)

    assert waiting["status"] == "waiting_for_input", waiting
    assert [p["tool"] for p in waiting["pending"]] == ["ops__inspect"]
    assert waiting["plan"]["status"] == "draft" and waiting["plan"]["revision"] == 1
    assert "execute_plan refused: it is not waiting for a message" in refused, refused
    [why] = refused_approvals(during)
    assert "not waiting for a message" in why, why
    assert during["plan"] == waiting["plan"] and [p["id"] for p in during["pending"]] == [
        p["id"] for p in waiting["pending"]
    ], "the draft and the pending approval are as they were"
    assert ops.ran("inspect") == [] and plan_events(tmp_path / "parley.db", sid) == 0


async def test_the_executing_turn_opens_with_a_note_naming_the_approved_revision(tmp_path: Path) -> None:
    async with (
        parley_app(agents={"planner": planner(mcp_servers=[])}, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        first = await call(client, "start_session", agent="planner", message=todos_line("one"))
        sid = first["session_id"]
        await call(client, "send_message", session_id=sid, message=todos_line("one", "two"))
        done = await call(client, "execute_plan", session_id=sid, revision=2)
        session = await call(client, "get_session", session_id=sid, messages_from=1, messages_limit=200)

    assert done["mode"] == "executing" and done["status"] == "answered", done
    opening = next(m for m in session["messages"] if m["turn_id"] == done["turn_id"])
    assert opening["role"] == "user"
    assert opening["text"] == (
        "Plan revision 2 is approved. Carry it out now, and keep each todo's status current with "
        "write_todos as you work (in_progress when you start it, completed when done)."
    )
