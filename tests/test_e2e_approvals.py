"""Human in the loop through processes: decisions made with the `parley` command line (a process
of its own) reach a running parley, and a person decides through elicitation over parley's own
stdio (a `parley serve` process, whose stdin reader carries the client's answers). The fixture MCP
server runs in the test's process. Everything else about approvals: tests/test_approvals.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import Client

from tests.support import (
    FIXTURE_LOG,
    REPO,
    TEST_DEADLINE_S,
    ServerProcess,
    call,
    call_error,
    fixture_in_process,
    fixture_runs,
    serving,
)
from tests.test_approvals import UNKNOWN_INTERRUPT, Person, World, park, write_world_config

# Person is used here and by tests/test_e2e_replicas.py, which imports it from this module.
__all__ = ["Person", "parley_cli"]

pytestmark = pytest.mark.anyio


def parley_cli(config: Path, *args: str, db: str | None = None) -> subprocess.CompletedProcess[str]:
    """`parley <command> --config config [--db db] <args...>`."""
    where = ["--db", db] if db else []
    return subprocess.run(
        [sys.executable, "-m", "parley", *args[:1], "--config", str(config), *where, *args[1:]],
        capture_output=True,
        text=True,
        timeout=TEST_DEADLINE_S,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    """One parley in the test's process, which the command line decides for through the database."""
    directory = tmp_path_factory.mktemp("approvals-cli")
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_world_config(directory, fixture)
        async with serving(config, name="approvals-cli", clean_log=True, world=World) as world:
            yield world


# ------------------------------------------------------------------ approver: human, and the command line


async def test_an_agent_approved_only_by_a_person_refuses_the_approve_tool(world: World) -> None:
    outcome = await park(world, '/tool fixture__bare {"text": "human only"}', agent="guarded")
    sid, iid = outcome["session_id"], outcome["pending"][0]["id"]
    before = world.interrupts(sid)
    refused = await call_error(
        world.client, "approve", session_id=sid, decisions=[{"interrupt_id": iid, "approved": True}]
    )
    assert "elicitation" in refused and f"parley approve {sid}" in refused
    question = await park(world, "/ask Really? | yes | no", agent="guarded")
    refused_answer = await call_error(
        world.client,
        "answer_question",
        session_id=question["session_id"],
        interrupt_id=question["pending"][0]["id"],
        answer="yes",
    )
    assert "approver: human" in refused_answer
    assert world.interrupts(sid) == before
    assert world.runs("bare", text="human only") == 0

    cli = await anyio.to_thread.run_sync(lambda: parley_cli(world.config, "approve", sid, iid))
    assert cli.returncode == 0, cli.stderr
    settled = await call(world.client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    assert settled["status"] == "idle"
    assert settled["last_turn"]["status"] == "answered"
    assert "bare human only" in settled["last_turn"]["answer"]
    assert world.interrupts(sid) == [(iid, "approved", "cli")]
    assert world.runs("bare", text="human only") == 1
    repeated = await anyio.to_thread.run_sync(lambda: parley_cli(world.config, "approve", sid, iid))
    assert repeated.returncode == 0 and "already resolved" in repeated.stdout
    assert world.runs("bare", text="human only") == 1


async def test_a_decision_made_with_the_command_line_reaches_the_running_server(world: World) -> None:
    approval = await park(world, '/tool fixture__append_note {"note": "from the cli"}')
    question = await park(world, "/ask Colour? | red | blue")
    sid, iid = approval["session_id"], approval["pending"][0]["id"]
    qsid, qid = question["session_id"], question["pending"][0]["id"]

    listed = await anyio.to_thread.run_sync(lambda: parley_cli(world.config, "pending", "--session", sid))
    assert listed.returncode == 0, listed.stderr
    assert iid in listed.stdout and "fixture__append_note" in listed.stdout

    rejected = await anyio.to_thread.run_sync(
        lambda: parley_cli(world.config, "approve", sid, iid, "--reject", "--reason", "ops said no")
    )
    assert rejected.returncode == 0, rejected.stderr
    answered = await anyio.to_thread.run_sync(lambda: parley_cli(world.config, "answer", qsid, qid, "red"))
    assert answered.returncode == 0, answered.stderr

    settled = await call(world.client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    assert settled["last_turn"]["status"] == "answered"
    assert "A person declined this call: ops said no" in settled["last_turn"]["answer"]
    qsettled = await call(world.client, "get_session", session_id=qsid, wait_seconds=TEST_DEADLINE_S)
    assert qsettled["last_turn"]["status"] == "answered"
    assert "The user answered: red" in qsettled["last_turn"]["answer"]
    assert world.runs("append_note", note="from the cli") == 0

    contrary = await anyio.to_thread.run_sync(lambda: parley_cli(world.config, "approve", sid, iid))
    assert contrary.returncode == 1 and "already resolved" in contrary.stderr
    outside = await anyio.to_thread.run_sync(lambda: parley_cli(world.config, "answer", qsid, qid, "green"))
    assert outside.returncode == 1
    assert world.interrupts(sid) == [(iid, "rejected", "cli")]


# ------------------------------------------------------------------ elicitation over stdio


async def test_a_person_decides_through_elicitation_over_stdio(tmp_path: Path) -> None:
    def reply(params: types.ElicitRequestParams) -> types.ElicitResult:
        if "dismiss me" in params.message:
            return types.ElicitResult(action="cancel")
        if "decline me" in params.message:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    person = Person(reply)
    async with fixture_in_process(tmp_path / FIXTURE_LOG) as fixture:
        server = ServerProcess(write_world_config(tmp_path, fixture), name="stdio-elicit")
        async with server, Client(server.transport(), mode="legacy", elicitation_callback=person) as client:
            sid = (await call(client, "start_session", agent="worker"))["session_id"]
            approved = await call(
                client, "send_message", session_id=sid, message='/tool fixture__bare {"text": "over stdio"}'
            )
            dismissed = await call(
                client, "send_message", session_id=sid, message='/tool fixture__bare {"text": "dismiss me"}'
            )
            declined = await call(
                client,
                "start_session",
                agent="worker",
                message='/tool fixture__append_note {"note": "decline me"}',
            )
            guarded = await call(
                client,
                "start_session",
                agent="guarded",
                message='/tool fixture__append_note {"note": "stdio"}',
            )
            refused = await call_error(
                client,
                "approve",
                session_id=guarded["session_id"],
                decisions=[{"interrupt_id": UNKNOWN_INTERRUPT, "approved": True}],
            )
    assert approved["status"] == "answered", approved
    assert "bare over stdio" in approved["answer"]
    assert fixture_runs(tmp_path, "bare", text="over stdio") == 1

    assert dismissed["status"] == "waiting_for_input", dismissed
    assert [p["tool"] for p in dismissed["pending"]] == ["fixture__bare"]
    assert fixture_runs(tmp_path, "bare", text="dismiss me") == 0

    assert declined["status"] == "answered", declined
    assert "A person declined this call: declined in the client" in declined["answer"]
    assert fixture_runs(tmp_path, "append_note", note="decline me") == 0

    assert guarded["status"] == "answered", guarded
    assert "appended stdio" in guarded["answer"]
    assert fixture_runs(tmp_path, "append_note", note="stdio") == 1
    assert "approver: human" in refused
    assert len(person.asked) == 4, "each interrupt was put to the person once"
