"""Many users over HTTP with static tokens (`auth: tokens`), end to end against one parley served
over HTTP in the test's process (the app of `parley serve --http`): the 401/403 handshake, owners
(every tool and every tasks/* method tried with another principal's ids), an agent's users and
approvers, the audit trail, fair-use limits, and tokens that never reach the config, the log or
the database. The admin scope and the approvers' audit, read with `parley audit` (the command
line, a process of its own): tests/test_e2e_auth_tokens.py."""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from parley.config.auth import token_digest
from parley.sdk_compat import create_mcp_http_client
from parley.tls import http_client
from tests.auth_support import bearer, initialize, token_client
from tests.sse_support import Frame, read_until
from tests.support import (
    FIXTURE_LOG,
    MCP_HEADERS,
    TEST_DEADLINE_S,
    InProcessServer,
    call,
    call_error,
    db_rows,
    eventually,
    fixture_in_process,
    fixture_runs,
    write_config,
)
from tests.task_client import (
    call_tool_as_task,
    cancel_task,
    get_task,
    get_task_modern,
    list_tasks,
    task_client,
    task_result,
)

pytestmark = pytest.mark.anyio

NAMES = ("alice", "bob", "pat", "ops", "watcher", "chatty", "busy", "ci")
SCOPES = {"ops": ["parley:admin"], "watcher": ["parley:metrics"]}
CI_ENV = "PARLEY_TEST_CI_TOKEN"
PUBLIC_HOST = "parley.example.test"
UNKNOWN_SESSION = "ses_" + "0" * 32
UNKNOWN_TASK = "task_" + "0" * 32

AGENTS: dict[str, dict[str, Any]] = {
    "worker": {"mcp_servers": ["fixture"], "tools": ["ask_user"]},
    "deployer": {"mcp_servers": ["fixture"], "approvers": {"principals": ["pat"]}},
    "private": {"users": {"principals": ["alice"]}},
    "careful": {"tools": ["write_todos"], "plan_mode": True, "approvers": {"principals": ["pat"]}},
}


@dataclass
class World:
    server: InProcessServer
    directory: Path
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        assert self.server.url is not None
        return self.server.url

    @property
    def base(self) -> str:
        return self.server.base_url

    @property
    def db(self) -> Path:
        return self.directory / "parley.db"

    def client(self, name: str, mode: str = "auto", **options: Any) -> Any:
        return token_client(self.url, self.tokens[name], mode, **options)

    @asynccontextmanager
    async def task_client(self, name: str, mode: str = "legacy") -> AsyncIterator[Client]:
        """The tests' task-capable client, sending `name`'s token."""
        http = create_mcp_http_client(headers=bearer(self.tokens[name]))
        transport = streamable_http_client(self.url, http_client=http)
        async with http, task_client(transport, mode=mode) as (client, _):
            yield client

    def count(self, table: str) -> int:
        return int(db_rows(self.db, f"SELECT count(*) FROM {table}")[0][0])


@asynccontextmanager
async def auth_world(directory: Path) -> AsyncIterator[World]:
    """One parley over HTTP in this process with a token for each of NAMES (ci's from the
    environment), the fixture MCP server in-process and the module's agents and limits."""
    tokens = {name: "parley_" + secrets.token_urlsafe(32) for name in NAMES}
    entries: list[dict[str, Any]] = [
        {"name": n, "sha256": token_digest(tokens[n]), "scopes": SCOPES.get(n, ["parley:use"])}
        for n in NAMES
        if n != "ci"
    ]
    entries.append({"name": "ci", "token_env": CI_ENV})
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_config(
            directory,
            agents=AGENTS,
            mcp_servers={"fixture": fixture},
            auth={"mode": "tokens", "tokens": entries},
            http={"allowed_hosts": [PUBLIC_HOST]},
            limits={"principals": {"chatty": {"messages_per_minute": 2}, "busy": {"running_turns": 1}}},
        )
        async with InProcessServer(config, http=True, env={CI_ENV: tokens["ci"]}) as server:
            yield World(server, directory, tokens)


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with auth_world(tmp_path_factory.mktemp("auth_tokens")) as world:
        yield world


async def _park(client: Client, agent: str = "worker", text: str = "needs approval") -> dict[str, Any]:
    outcome = await call(
        client, "start_session", agent=agent, message=f'/tool fixture__bare {{"text": "{text}"}}'
    )
    assert outcome["status"] == "waiting_for_input", outcome
    return outcome


def _same_answer(foreign: str, foreign_id: str, unknown: str, unknown_id: str) -> None:
    assert foreign.replace(foreign_id, "<id>") == unknown.replace(unknown_id, "<id>")


async def _mcp_error(request: Awaitable[Any]) -> MCPError:
    with pytest.raises(MCPError) as failure:
        with anyio.fail_after(TEST_DEADLINE_S):
            await request
    return failure.value


# ------------------------------------------------------------------ the handshake


async def test_no_token_or_an_unknown_one_gets_401_with_a_plain_bearer_challenge_and_stores_nothing(
    world: World,
) -> None:
    sessions, audit = world.count("sessions"), world.count("audit")
    call_tool = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "start_session", "arguments": {"agent": "demo", "message": "sneaky"}},
    }
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        for headers in (
            {},
            bearer("parley_" + secrets.token_urlsafe(32)),
            bearer(world.tokens["alice"] + "x"),
        ):
            refused = await http.post(world.url, json=call_tool, headers={**MCP_HEADERS, **headers})
            assert refused.status_code == 401, refused.text
            challenge = refused.headers["www-authenticate"]
            assert challenge.startswith('Bearer realm="parley"'), challenge
            assert "resource_metadata" not in challenge, "tokens mode names no authorization server"
            assert ("invalid_token" in challenge) == bool(headers), challenge
        malformed = await http.post(
            world.url, json=call_tool, headers={**MCP_HEADERS, "Authorization": "Basic YTpi"}
        )
        assert (
            malformed.status_code == 401
            and 'error="invalid_request"' in malformed.headers["www-authenticate"]
        )
    assert (world.count("sessions"), world.count("audit")) == (sessions, audit)


async def test_no_protected_resource_metadata_is_published_in_tokens_mode(world: World) -> None:
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            anonymous = await http.get(world.base + path)
            assert anonymous.status_code == 401
            with_token = await http.get(world.base + path, headers=bearer(world.tokens["alice"]))
            assert with_token.status_code == 404


async def test_a_token_without_parley_use_gets_403_naming_the_scope(world: World) -> None:
    refused = await initialize(world.url, bearer(world.tokens["watcher"]))
    assert refused.status_code == 403
    challenge = refused.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="parley:use"' in challenge, challenge


async def test_healthz_is_open_but_says_only_its_status_without_a_metrics_token(world: World) -> None:
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        for token in (None, world.tokens["alice"], "parley_wrong"):
            public = await http.get(world.base + "/healthz", headers=bearer(token) if token else {})
            assert public.status_code == 200 and public.json() == {"status": "ok"}, public.text
        full = await http.get(world.base + "/healthz", headers=bearer(world.tokens["watcher"]))
    report = full.json()
    assert report["status"] == "ok" and "running_turns" in report and "process_id" in report


async def test_a_configured_host_name_is_served_and_a_foreign_one_is_not(world: World) -> None:
    ok = await initialize(world.url, {**bearer(world.tokens["alice"]), "Host": PUBLIC_HOST})
    assert ok.status_code == 200, ok.text
    foreign = await initialize(world.url, {**bearer(world.tokens["alice"]), "Host": "evil.example"})
    assert foreign.status_code == 421


async def test_a_token_from_the_environment_works_and_the_config_holds_no_token(world: World) -> None:
    async with world.client("ci") as client:
        outcome = await call(client, "start_session", agent="demo", message="from ci")
    assert outcome["status"] == "answered"
    assert db_rows(world.db, "SELECT owner FROM sessions WHERE id = ?", (outcome["session_id"],)) == [("ci",)]
    text = world.server.config_path.read_text()
    assert not any(token in text for token in world.tokens.values())


# ------------------------------------------------------------------ owners


async def test_another_principals_sessions_answer_every_tool_exactly_like_unknown_ids(world: World) -> None:
    async with world.client("alice") as alice, world.client("bob") as bob:
        parked = await _park(alice)
        sid, [pending] = parked["session_id"], parked["pending"]
        iid = pending["id"]
        queued = await call(alice, "send_message", session_id=sid, message="queued behind", wait_seconds=0)
        qid = queued["queued_message_id"]

        attempts: list[tuple[str, dict[str, Any]]] = [
            ("get_session", {}),
            ("send_message", {"message": "hi from bob"}),
            ("send_message", {"steer": True, "queued_message_id": qid}),
            ("approve", {"decisions": [{"interrupt_id": iid, "approved": True}]}),
            ("answer_question", {"interrupt_id": iid, "answer": "yes"}),
            ("delete_queued_message", {"queued_message_id": qid}),
            ("cancel_turn", {}),
            ("close_session", {}),
            ("delete_session", {}),
        ]
        for tool, arguments in attempts:
            foreign = await call_error(bob, tool, session_id=sid, **arguments)
            unknown = await call_error(bob, tool, session_id=UNKNOWN_SESSION, **arguments)
            _same_answer(foreign, sid, unknown, UNKNOWN_SESSION)
            assert "No session" in foreign, (tool, foreign)
        listed = await call(bob, "list_sessions")
        assert sid not in [s["session_id"] for s in listed["sessions"]]
        assert iid not in [p["interrupt"]["id"] for p in (await call(bob, "list_pending"))["pending"]]
        refused = await call_error(bob, "list_sessions", owner="alice")
        assert "parley:admin" in refused

        # Nothing of bob's attempts reached alice's session.
        after = await call(alice, "get_session", session_id=sid)
        assert after["status"] == "waiting_for_input" and [q["id"] for q in after["queued_messages"]] == [qid]
        assert fixture_runs(world.directory, "bare", text="needs approval") == 0
        assert "hi from bob" not in str(after["messages"])
        await call(alice, "close_session", session_id=sid)
    # Each of bob's acts (not his reads) is in the audit, naming what he tried on which id and why.
    tried = db_rows(
        world.db,
        "SELECT action, target, session_id, detail FROM audit WHERE principal = 'bob' AND outcome = 'refused' "
        "AND detail LIKE ? ORDER BY id",
        (f'%"session":"{sid}"%',),
    )
    assert [(action, target, session) for action, target, session, _ in tried] == [
        ("message", None, None),
        ("steer", qid, None),
        ("approve", iid, None),
        ("answer", iid, None),
        ("delete_queued_message", qid, None),
        ("cancel", None, None),
        ("close", None, None),
        ("delete_session", None, None),
    ]
    assert all('"reason":"not_found"' in detail and "a session of alice" in detail for *_, detail in tried)
    assert f"refused approve by bob on session {sid} ({iid})" in world.server.log()


async def test_another_principals_mcp_tasks_answer_every_tasks_method_like_unknown_ids(world: World) -> None:
    async with world.task_client("alice") as alice, world.task_client("bob") as bob:
        task = await call_tool_as_task(
            alice, "start_session", {"agent": "worker", "message": '/tool fixture__bare {"text": "task"}'}
        )
        tid = task["taskId"]
        for method in (get_task, task_result, cancel_task):
            foreign = await _mcp_error(method(bob, tid))
            unknown = await _mcp_error(method(bob, UNKNOWN_TASK))
            assert foreign.error.code == unknown.error.code == -32602
            _same_answer(foreign.error.message, tid, unknown.error.message, UNKNOWN_TASK)
        assert tid not in [t["taskId"] for t in (await list_tasks(bob))["tasks"]]
        cancels = (
            "SELECT count(*) FROM audit WHERE principal = 'bob' AND action = 'task_cancel' AND target = ?"
        )
        assert db_rows(world.db, cancels, (tid,)) == [(1,)], "bob's cancel of alice's task is audited"
        assert (await get_task(alice, tid))["status"] == "input_required", "alice's task is untouched"
        assert [t["taskId"] for t in (await list_tasks(alice))["tasks"]].count(tid) == 1
        await cancel_task(alice, tid)
    async with world.task_client("bob", mode="auto") as modern:
        foreign = await _mcp_error(get_task_modern(modern, tid))
        unknown = await _mcp_error(get_task_modern(modern, UNKNOWN_TASK))
        _same_answer(foreign.error.message, tid, unknown.error.message, UNKNOWN_TASK)


async def test_an_agent_with_users_is_invisible_and_unknown_to_everybody_else(world: World) -> None:
    async with world.client("alice") as alice, world.client("bob") as bob:
        assert "private" in [a["name"] for a in (await call(alice, "list_agents"))["agents"]]
        assert "private" not in [a["name"] for a in (await call(bob, "list_agents"))["agents"]]
        refused = await call_error(bob, "start_session", agent="private", message="let me in")
        assert refused == (
            await call_error(bob, "start_session", agent="no-such-agent", message="x")
        ).replace("no-such-agent", "private")
        assert (await call(alice, "start_session", agent="private", message="mine"))["status"] == "answered"


# ------------------------------------------------------------------ approvers


async def test_a_persons_form_decides_for_the_owner_but_not_where_only_approvers_may(world: World) -> None:
    asked: list[str] = []

    async def approve_in_form(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    for mode in ("auto", "legacy"):  # an input-required round (MRTR), then blocking elicitation
        asked.clear()
        async with world.client("alice", mode, elicitation_callback=approve_in_form) as alice:
            text = f"form {mode}"
            done = await call(
                alice, "start_session", agent="worker", message=f'/tool fixture__bare {{"text": "{text}"}}'
            )
            assert done["status"] == "answered" and f"bare {text}" in done["answer"], done
            assert asked and fixture_runs(world.directory, "bare", text=text) == 1
            mine = await call(alice, "get_session", session_id=done["session_id"])
            [decision] = mine["decisions"]
            assert (decision["principal"], decision["action"], decision["via"]) == (
                "alice",
                "approve",
                "mrtr" if mode == "auto" else "elicitation",
            )

            asked.clear()
            held = await call(
                alice,
                "start_session",
                agent="deployer",
                message='/tool fixture__bare {"text": "not mine to approve"}',
            )
            assert held["status"] == "waiting_for_input" and asked == [], (
                "only the approvers decide for deployer"
            )
            await call(alice, "close_session", session_id=held["session_id"])


async def test_an_input_required_round_belongs_to_its_principal(world: World) -> None:
    arguments = {"agent": "worker", "message": '/tool fixture__bare {"text": "bound to alice"}'}

    async def never(context: Any, params: Any) -> types.ElicitResult:
        raise AssertionError("the rounds are answered by hand here")

    # Clients that can show forms (so parley asks by an input-required round), driven by hand.
    async with (
        world.client("alice", elicitation_callback=never) as alice,
        world.client("bob", elicitation_callback=never) as bob,
    ):
        first = await alice.session.call_tool(
            "start_session", arguments, read_timeout_seconds=TEST_DEADLINE_S, allow_input_required=True
        )
        assert isinstance(first, types.InputRequiredResult), first
        answers: dict[str, Any] = {
            key: types.ElicitResult(action="accept", content={"decision": "approve"})
            for key in first.input_requests or {}
        }
        stolen = await _mcp_error(
            bob.session.call_tool(
                "start_session",
                arguments,
                read_timeout_seconds=TEST_DEADLINE_S,
                input_responses=answers,
                request_state=first.request_state,
            )
        )
        assert stolen.error.code == -32602, stolen
        assert fixture_runs(world.directory, "bare", text="bound to alice") == 0
        done = await alice.session.call_tool(
            "start_session",
            arguments,
            read_timeout_seconds=TEST_DEADLINE_S,
            input_responses=answers,
            request_state=first.request_state,
        )
        assert isinstance(done, types.CallToolResult) and not done.is_error
        assert done.structured_content is not None and done.structured_content["status"] == "answered"
        assert fixture_runs(world.directory, "bare", text="bound to alice") == 1


# ------------------------------------------------------------------ fair use


async def test_over_the_message_rate_the_error_says_when_to_retry_and_others_are_unaffected(
    world: World,
) -> None:
    async with world.client("chatty") as chatty, world.client("bob") as bob:
        first = await call(chatty, "start_session", agent="demo", message="one")
        await call(chatty, "send_message", session_id=first["session_id"], message="two")
        refused = await call_error(chatty, "send_message", session_id=first["session_id"], message="three")
        assert re.search(r"Try again in \d+ s", refused), refused
        assert "limits.messages_per_minute = 2" in refused
        assert (await call(bob, "start_session", agent="demo", message="unaffected"))["status"] == "answered"
        after = await call(chatty, "get_session", session_id=first["session_id"])
        assert "three" not in str(after["messages"])


async def test_over_the_running_turn_limit_a_new_turn_is_refused_and_a_queued_message_is_not(
    world: World,
) -> None:
    async with world.client("busy") as busy, world.client("bob") as bob:
        slow = await call(
            busy, "start_session", agent="demo", message=f"/sleep {TEST_DEADLINE_S}\nslow", wait_seconds=0
        )
        assert slow["status"] == "running"
        refused = await call_error(busy, "start_session", agent="demo", message="another one")
        assert "limits.running_turns = 1" in refused and "Try again when one of them has answered" in refused
        queued = await call(
            busy, "send_message", session_id=slow["session_id"], message="after it", wait_seconds=0
        )
        assert queued["status"] == "running"
        assert (await call(bob, "start_session", agent="demo", message="fine"))["status"] == "answered"
        await call(busy, "close_session", session_id=slow["session_id"])

        async def free() -> bool:
            return db_rows(
                world.db, "SELECT count(*) FROM sessions WHERE owner = 'busy' AND status = 'running'"
            ) == [(0,)]

        await eventually(free, "busy's turn to end")
        assert (await call(busy, "start_session", agent="demo", message="now"))["status"] == "answered"


# ------------------------------------------------------------------ secrets


async def test_no_token_reaches_the_log_or_the_database(world: World) -> None:
    """Last in the module: every token has been used (or refused) by now."""
    no_token_stored(world)


def no_token_stored(world: World) -> None:
    """No token of `world`, whole or its secret part, is in parley's log or its database files."""
    log = world.server.log()
    stored = b"".join(p.read_bytes() for p in world.directory.glob("parley.db*") if p.is_file())
    for name, token in world.tokens.items():
        assert token not in log, f"{name}'s token is in the log"
        assert token.encode() not in stored, f"{name}'s token is in the database"
        secret_part = token.removeprefix("parley_")
        assert secret_part not in log and secret_part.encode() not in stored


# ------------------------------------------------------------------ default limits of many users


async def test_without_limits_set_one_principal_runs_at_most_four_turns_and_others_are_served(
    world: World,
) -> None:
    """The module's `limits:` sets only other principals' limits: ci gets the multi-user defaults."""
    async with world.client("ci") as ci, world.client("bob") as bob:
        slow = [
            await call(
                ci, "start_session", agent="demo", message=f"/sleep {TEST_DEADLINE_S}\n{i}", wait_seconds=0
            )
            for i in range(4)
        ]
        assert [s["status"] for s in slow] == ["running"] * 4
        refused = await call_error(ci, "start_session", agent="demo", message="a fifth")
        assert "limits.running_turns = 4" in refused
        assert (await call(bob, "start_session", agent="demo", message="unaffected"))["status"] == "answered"
        for started in slow:
            await call(ci, "close_session", session_id=started["session_id"], wait_seconds=0)


# ------------------------------------------------------------------ who decides, in the inbox


async def test_the_inbox_says_whether_the_caller_may_decide_and_who_does_if_not(world: World) -> None:
    async with world.client("alice") as alice:
        parked = await _park(alice, agent="deployer", text="inbox")
        sid, iid = parked["session_id"], parked["pending"][0]["id"]
        inboxes = {}
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            for name in ("alice", "pat"):
                found = await http.get(world.base + "/v1/pending", headers=bearer(world.tokens[name]))
                inboxes[name] = next(p for p in found.json()["pending"] if p["interrupt"]["id"] == iid)
        assert inboxes["alice"]["may_decide"] is False, "only the agent's approvers decide"
        assert "approvers of agent 'deployer'" in inboxes["alice"]["decided_by"]
        assert "pat" in inboxes["alice"]["decided_by"]
        assert inboxes["pat"]["may_decide"] is True and inboxes["pat"]["decided_by"] is None
        await call(alice, "close_session", session_id=sid)


async def test_a_draft_plan_is_approved_by_the_agents_approvers_only(world: World) -> None:
    plan = '/tool write_todos {"todos": [{"content": "ship it"}]}'
    async with world.client("alice") as alice, world.client("bob") as bob, world.client("pat") as pat:
        drafted = await call(alice, "start_session", agent="careful", message=plan)
        sid = drafted["session_id"]
        assert drafted["plan"]["status"] == "draft"
        mine = await call_error(alice, "execute_plan", session_id=sid, revision=1)
        assert "only from its approvers" in mine, "the owner is not one of careful's approvers"
        foreign = await call_error(bob, "execute_plan", session_id=sid, revision=1)
        assert f"No session '{sid}' was found for you" in foreign, "another's session is not found"
        inbox = await call(pat, "list_pending")
        [draft] = [d for d in inbox["drafts"] if d["session_id"] == sid]
        assert draft["may_decide"] is True and draft["plan"]["todos"] == [
            {"content": "ship it", "status": "pending"}
        ]
        approved = await call(pat, "execute_plan", session_id=sid, revision=1)
        assert "approved revision 1 as an approver" in approved["notes"][0], approved
        after = await call(alice, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        with anyio.fail_after(TEST_DEADLINE_S):
            while after["status"] != "idle":  # each wait returns when the session changed
                after = await call(alice, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    assert after["plan"]["status"] == "completed"
    [decision] = [d for d in after["decisions"] if d["action"] == "execute_plan" and d["outcome"] == "ok"]
    assert decision["principal"] == "pat"


async def test_an_approvers_owner_stream_follows_the_drafts_it_may_approve(world: World) -> None:
    seen: list[Frame] = []
    started: dict[str, Any] = {}
    plan = '/tool write_todos {"todos": [{"content": "watched plan"}]}'

    async def draft_when_open() -> None:
        async with world.client("alice") as alice:
            started.update(await call(alice, "start_session", agent="careful", message=plan))

    async with anyio.create_task_group() as tg:

        def stop(frame: Frame) -> bool:
            seen.append(frame)
            if frame.kind == "snapshot":
                tg.start_soon(draft_when_open)
            return frame.kind == "plan_updated" and bool(frame.data) and "watched plan" in str(frame.data)

        await read_until(world.base + "/v1/events", stop, headers=bearer(world.tokens["pat"]))
    theirs = [f for f in seen if f.data and f.data.get("session_id") == started.get("session_id")]
    assert theirs and {f.kind for f in theirs} <= {"plan_updated", "plan_execution_started"}, [
        f.kind for f in theirs
    ]
    async with world.client("alice") as alice:
        await call(alice, "close_session", session_id=started["session_id"])
