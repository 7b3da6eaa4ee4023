"""Sessions that stay manageable, end to end against one parley served over HTTP (in this
process) with two principals (static tokens), on SQLite and on PostgreSQL: titles (proposed from
the first message, set with update_session) and tags; delete_session (owner only, a running turn stopped first) leaving no row of the session in any session table,
keeping the audit record, and never touching another owner's session. list_sessions and the
`parley sessions` command line (a process of its own) are tests/test_e2e_manage.py."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from parley.sdk_compat import create_mcp_http_client
from parley.tls import http_client
from tests.auth_support import bearer, token_client
from tests.conftest import database_for
from tests.sse_support import read_until
from tests.support import (
    CALL_DEADLINE_S,
    REPO,
    TEST_DEADLINE_S,
    Database,
    InProcessServer,
    call,
    call_error,
    eventually,
    tokens_auth,
    write_config,
)
from tests.task_client import call_tool_as_task, task_client

pytestmark = pytest.mark.anyio

NAMES = ("alice", "bob")
AGENTS: dict[str, dict[str, Any]] = {"helper": {"tools": ["write_todos", "ask_user"]}}
LONG_FIRST = "Plan the trip to Lyon next spring with the kids and the dog please"


@dataclass
class World:
    server: InProcessServer
    database: Database
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        assert self.server.url is not None
        return self.server.url

    @property
    def base(self) -> str:
        return self.server.base_url

    def client(self, name: str) -> Any:
        return token_client(self.url, self.tokens[name])

    @asynccontextmanager
    async def task_client(self, name: str) -> AsyncIterator[Client]:
        """The tests' task-capable client (2025-11-25 tasks), sending `name`'s token."""
        http = create_mcp_http_client(headers=bearer(self.tokens[name]))
        async with (
            http,
            task_client(streamable_http_client(self.url, http_client=http), mode="legacy") as (client, _),
        ):
            yield client

    async def v1(self, who: str, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            response = await http.request(
                method, self.base + path, headers=bearer(self.tokens[who]), **kwargs
            )
        assert response.status_code == status, (response.status_code, response.text)
        return response.json()

    def session_tables(self) -> list[str]:
        """Every table with a session_id column but the audit trail (which outlives sessions)."""
        if self.database.kind == "sqlite":
            tables = [r[0] for r in self.database.rows("SELECT name FROM sqlite_master WHERE type = 'table'")]
            found = [
                t
                for t in tables
                if any(c[1] == "session_id" for c in self.database.rows(f"PRAGMA table_info({t})"))
            ]
        else:
            found = [
                r[0]
                for r in self.database.rows(
                    "SELECT table_name FROM information_schema.columns WHERE table_schema = ? AND column_name = 'session_id'",
                    (self.database.schema,),
                )
            ]
        return sorted(t for t in found if t != "audit")

    def rows_of(self, session_id: str) -> dict[str, int]:
        """One query per session table: how many rows the session has in each (and in sessions)."""
        counts = {
            table: int(
                self.database.rows(f"SELECT count(*) FROM {table} WHERE session_id = ?", (session_id,))[0][0]
            )
            for table in self.session_tables()
        }
        counts["sessions"] = int(
            self.database.rows("SELECT count(*) FROM sessions WHERE id = ?", (session_id,))[0][0]
        )
        return counts

    def audit_of(self, session_id: str) -> list[tuple[str, str]]:
        rows = self.database.rows(
            "SELECT principal, action FROM audit WHERE session_id = ? ORDER BY id", (session_id,)
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `parley <args>` (a process of its own) on this database; in a thread, so that the
        parley in this process goes on serving meanwhile."""
        db = ["--db", self.database.db_arg] if self.database.db_arg else []
        command = [
            sys.executable,
            "-m",
            "parley",
            *args[:1],
            "--config",
            str(self.server.config_path),
            *db,
            *args[1:],
        ]
        return await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=TEST_DEADLINE_S,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
            )
        )


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
async def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    directory: Path = tmp_path_factory.mktemp(f"manage_{request.param}")
    with database_for(request.param, directory, "manage") as database:
        tokens = {name: "parley_" + secrets.token_urlsafe(32) for name in NAMES}
        config = write_config(directory, agents=AGENTS, database=database, auth=tokens_auth(tokens))
        async with InProcessServer(config, http=True, db=database.db_arg) as server:
            yield World(server, database, tokens)
            # This parley has no MCP server downstream: every mcp.client record is the test's own
            # clients', in this process (a `parley serve` process's log would not hold them).
            log = server.parley.log(without=("mcp.client",))
            assert "Traceback" not in log, log


async def test_a_session_is_titled_from_its_first_message_and_renamed_and_tagged_by_its_owner_only(
    world: World,
) -> None:
    async with world.client("alice") as alice, world.client("bob") as bob:
        started = await call(alice, "start_session", agent="demo", message=LONG_FIRST)
        sid = started["session_id"]
        view = await call(alice, "get_session", session_id=sid)
        assert view["title"] == "Plan the trip to Lyon next spring with …" and view["tags"] == []
        idle = await call(alice, "start_session", agent="demo")
        assert (await call(alice, "get_session", session_id=idle["session_id"]))["title"] is None
        await call(alice, "send_message", session_id=idle["session_id"], message="  Taxes\n2026 ")
        assert (await call(alice, "get_session", session_id=idle["session_id"]))["title"] == "Taxes 2026"

        updated = await call(
            alice, "update_session", session_id=sid, title="Lyon trip", tags=["travel", "family", "travel"]
        )
        assert (updated["title"], updated["tags"]) == ("Lyon trip", ["travel", "family"])
        # A later message never replaces a title.
        await call(alice, "send_message", session_id=sid, message="and book the train")
        view = await call(alice, "get_session", session_id=sid)
        assert (view["title"], view["tags"]) == ("Lyon trip", ["travel", "family"])

        refusals: dict[str, dict[str, Any]] = {
            "tags": {"tags": ["two words"]},
            "title": {"title": "line one\nline two"},
        }
        for field, arguments in refusals.items():
            error = await call_error(alice, "update_session", session_id=sid, **arguments)
            assert f"'{field}'" in error, error
        assert "at most 20" in await call_error(
            alice, "update_session", session_id=sid, tags=[f"t{i}" for i in range(21)]
        )
        assert "nothing was changed" in await call_error(alice, "update_session", session_id=sid)
        assert "No session" in await call_error(bob, "update_session", session_id=sid, title="mine now")
        view = await call(alice, "get_session", session_id=sid)
        assert (view["title"], view["tags"]) == ("Lyon trip", ["travel", "family"]), (
            "a refused call changes nothing"
        )

        # The same over /v1, and "" clears the title.
        patched = await world.v1("alice", "PATCH", f"/v1/sessions/{sid}", json={"title": "", "tags": ["x:y"]})
        assert (patched["title"], patched["tags"]) == (None, ["x:y"])
        problem = await world.v1("alice", "PATCH", f"/v1/sessions/{sid}", 400, json={"tags": ["no way"]})
        assert problem["field"] == "tags"
        await world.v1("bob", "PATCH", f"/v1/sessions/{sid}", 404, json={"title": "x"})
        assert ("alice", "update_session") in world.audit_of(sid)


async def test_titles_and_tags_show_in_the_v1_json_and_the_events_snapshot(world: World) -> None:
    async with world.client("alice") as alice:
        parked = await call(alice, "start_session", agent="helper", message="/ask Which city? | Lyon | Paris")
        assert parked["status"] == "waiting_for_input"
        sid = parked["session_id"]
        await call(alice, "update_session", session_id=sid, title="City choice", tags=["waiting"])
    got = await world.v1("alice", "GET", f"/v1/sessions/{sid}")
    assert (got["title"], got["tags"]) == ("City choice", ["waiting"])
    listed = await world.v1("alice", "GET", "/v1/sessions", params={"tag": "waiting"})
    assert [(s["session_id"], s["title"]) for s in listed["sessions"]] == [(sid, "City choice")]
    snapshot = (
        await read_until(
            world.base + "/v1/events", lambda f: f.kind == "snapshot", headers=bearer(world.tokens["alice"])
        )
    )[-1]
    [mine] = [s for s in snapshot.data["sessions"] if s["session_id"] == sid]
    assert (mine["title"], mine["tags"]) == ("City choice", ["waiting"])
    # The session's own stream carries the change as an event.
    stream = await read_until(
        f"{world.base}/v1/sessions/{sid}/events",
        lambda f: f.kind == "session_updated",
        headers=bearer(world.tokens["alice"]),
    )
    assert stream[-1].data["data"] == {"title": "City choice", "tags": ["waiting"]}


async def _full_session(world: World, client: Client, who: str) -> str:
    """A session with a row in nearly every session table: a transcript, turns, tool calls, an
    answered question (interrupts), queued messages, events, steps and an MCP task."""
    started = await call(
        client,
        "start_session",
        agent="helper",
        message='/tool write_todos {"todos": [{"content": "pack"}]}',
    )
    sid: str = started["session_id"]
    asked = await call(client, "send_message", session_id=sid, message="/ask Train or car? | train | car")
    [question] = asked["pending"]
    await call(client, "answer_question", session_id=sid, interrupt_id=question["id"], answer="train")
    async with world.task_client(who) as tasks:
        await call_tool_as_task(tasks, "send_message", {"session_id": sid, "message": "thanks"})
    await eventually(lambda: _idle(client, sid), "the task's turn to end")
    return sid


async def _idle(client: Client, sid: str) -> bool:
    status: str = (await call(client, "get_session", session_id=sid))["status"]
    return status == "idle"


async def test_delete_session_leaves_no_row_of_the_session_keeps_the_audit_and_touches_no_other_owner(
    world: World,
) -> None:
    async with world.client("alice") as alice, world.client("bob") as bob:
        sid = await _full_session(world, alice, "alice")
        kept = await _full_session(world, bob, "bob")
        before = world.rows_of(sid)
        for table in (
            "messages",
            "events",
            "turns",
            "tool_calls",
            "interrupts",
            "queued_messages",
            "steps",
            "tasks",
        ):
            assert before[table] > 0, (table, before)
        bobs_rows = world.rows_of(kept)

        # Not bob's to delete: the same answer as an unknown session, and nothing changes.
        assert "No session" in await call_error(bob, "delete_session", session_id=sid)
        assert world.rows_of(sid) == before

        assert (await call(alice, "delete_session", session_id=sid))["status"] == "deleted"
        after = world.rows_of(sid)
        assert set(after) >= {
            "messages",
            "events",
            "turns",
            "tool_calls",
            "interrupts",
            "queued_messages",
            "steps",
            "summaries",
            "tasks",
            "sessions",
        }
        assert all(count == 0 for count in after.values()), after
        assert world.rows_of(kept) == bobs_rows, "another owner's session is untouched"
        assert world.audit_of(sid)[-1] == ("alice", "delete_session")
        assert (await call(alice, "delete_session", session_id=sid))["status"] == "already deleted"
        assert "No session" in await call_error(alice, "get_session", session_id=sid)
        assert "No session" in await call_error(bob, "delete_session", session_id=sid)
        # This process sent alice's messages to it before: a message now is refused all the same,
        # recorded as an attempt on an unknown session, and brings back no row.
        assert "No session" in await call_error(alice, "send_message", session_id=sid, message="still there?")
        refused = world.database.rows(
            "SELECT principal, action, outcome, detail FROM audit WHERE session_id IS NULL AND action = ?",
            ("message",),
        )
        assert [(r[0], r[1], r[2]) for r in refused] == [("alice", "message", "refused")]
        assert "not found: no such session" in str(refused[0][3])
        assert all(count == 0 for count in world.rows_of(sid).values())


async def test_deleting_a_session_that_runs_a_turn_stops_the_turn_first(world: World) -> None:
    async with world.client("alice") as alice:
        started = await call(alice, "start_session", agent="demo", message="/sleep 600\nslow", wait_seconds=0)
        sid = started["session_id"]
        await call(alice, "send_message", session_id=sid, message="queued behind", wait_seconds=0)
        assert (await call(alice, "get_session", session_id=sid))["status"] == "running"
        assert (await call(alice, "delete_session", session_id=sid))["status"] == "deleted"
        assert all(count == 0 for count in world.rows_of(sid).values()), world.rows_of(sid)
        assert [a for _, a in world.audit_of(sid)][-2:] == ["close", "delete_session"]

        # Over /v1 too.
        running = await world.v1(
            "alice",
            "POST",
            "/v1/sessions",
            201,
            json={"agent": "demo", "message": "/sleep 600\nx", "wait_seconds": 0},
        )
        deleted = await world.v1("alice", "DELETE", f"/v1/sessions/{running['session_id']}")
        assert deleted == {"session_id": running["session_id"], "status": "deleted"}
        assert world.rows_of(running["session_id"])["sessions"] == 0
