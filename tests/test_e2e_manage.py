"""Sessions that stay manageable, with the `parley sessions` command line (a process of its own)
against the database of one parley served over HTTP (in this process), on SQLite and on
PostgreSQL: list_sessions (the MCP tool, GET /v1/sessions and the command line) narrowed by title
text, tag, agent, status and creation time, with paging; the command line updating and deleting
sessions, with the audit naming the operator. The rest is tests/test_manage.py."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import database_for
from tests.support import InProcessServer, call, call_error, tokens_auth, write_config
from tests.test_manage import AGENTS, NAMES, World

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
async def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    directory: Path = tmp_path_factory.mktemp(f"manage_cli_{request.param}")
    with database_for(request.param, directory, "manage_cli") as database:
        tokens = {name: "parley_" + secrets.token_urlsafe(32) for name in NAMES}
        config = write_config(directory, agents=AGENTS, database=database, auth=tokens_auth(tokens))
        async with InProcessServer(config, http=True, db=database.db_arg) as server:
            yield World(server, database, tokens)
            assert "Traceback" not in server.log(), server.log()


async def _pages(client: Client, **narrowing: Any) -> list[str]:
    """Every session list_sessions returns for `narrowing`, two at a time, newest first."""
    found: list[str] = []
    cursor = None
    for _ in range(50):
        page = await call(
            client, "list_sessions", limit=2, **narrowing, **({"cursor": cursor} if cursor else {})
        )
        assert len(page["sessions"]) <= 2
        found += [s["session_id"] for s in page["sessions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return found
    raise AssertionError("paging does not end")


async def test_list_sessions_narrows_by_title_text_tag_agent_status_and_creation_time_with_paging(
    world: World,
) -> None:
    marker = secrets.token_hex(3)  # this test's sessions only, whatever the others left
    async with world.client("alice") as alice, world.client("bob") as bob:
        made: list[tuple[str, str]] = []  # (session_id, created_at), oldest first
        plan = [
            ("demo", f"{marker} budget review", ["work", f"m{marker}"], False),
            ("helper", f"{marker} holiday plans", ["home", f"m{marker}"], False),
            ("demo", f"{marker} Budget for the holiday", ["home", f"m{marker}"], True),
            ("helper", f"{marker} car repair", ["work", f"m{marker}"], False),
            ("demo", f"{marker} BUDGET 2027", [f"m{marker}"], False),
        ]
        for agent, title, tags, close in plan:
            started = await call(alice, "start_session", agent=agent, message="hello")
            sid = started["session_id"]
            await call(alice, "update_session", session_id=sid, title=title, tags=tags)
            if close:
                await call(alice, "close_session", session_id=sid)
            view = await call(alice, "get_session", session_id=sid)
            made.append((sid, view["created_at"]))
        bobs = await call(bob, "start_session", agent="demo", message="hello")
        await call(
            bob,
            "update_session",
            session_id=bobs["session_id"],
            title=f"{marker} budget of bob",
            tags=[f"m{marker}"],
        )

        ids = [sid for sid, _ in made]
        # The window below takes shown times as bounds: each session a millisecond of its own.
        shown = [created for _, created in made]
        assert shown == sorted(set(shown)), shown
        newest_first = list(reversed(ids))
        tag = f"m{marker}"
        assert await _pages(alice, tag=tag) == newest_first
        assert await _pages(alice, title=f"{marker} budget") == [ids[4], ids[2], ids[0]]
        assert await _pages(alice, title="HOLIDAY", tag=tag) == [ids[2], ids[1]]
        assert await _pages(alice, tag="work", title=marker) == [ids[3], ids[0]]
        assert await _pages(alice, agent="helper", tag=tag) == [ids[3], ids[1]]
        assert await _pages(alice, status="closed", tag=tag) == [ids[2]]
        assert await _pages(alice, status="idle", agent="demo", title=marker) == [ids[4], ids[0]]
        window = {"created_after": made[1][1], "created_before": made[4][1]}
        assert await _pages(alice, tag=tag, **window) == [ids[3], ids[2], ids[1]]
        assert await _pages(bob, tag=tag) == [bobs["session_id"]]

        for field, arguments in {
            "created_after": {"created_after": "last tuesday"},
            "created_before": {"created_after": made[4][1], "created_before": made[1][1]},
            "tag": {"tag": "a b"},
        }.items():
            assert f"'{field}'" in await call_error(alice, "list_sessions", **arguments)
        # A cursor's time is a finite number as this server writes it, never inf or nan.
        for when in ("1e999", "nan", "-inf", "1_7e9", " 17e8"):
            refused = await call_error(alice, "list_sessions", cursor=f"{when}|{ids[0]}")
            assert "'cursor'" in refused and "not a cursor this server returned" in refused, when

    # GET /v1/sessions takes the same narrowing and pages alike.
    query = {"tag": tag, "title": "budget", "limit": "2"}
    first = await world.v1("alice", "GET", "/v1/sessions", params=query)
    second = await world.v1("alice", "GET", "/v1/sessions", params={**query, "cursor": first["next_cursor"]})
    assert [s["session_id"] for s in first["sessions"] + second["sessions"]] == [ids[4], ids[2], ids[0]]
    assert second["next_cursor"] is None
    problem = await world.v1("alice", "GET", "/v1/sessions", 400, params={"created_before": "soon"})
    assert problem["field"] == "created_before"

    # And the command line (an operator's, naming the owner).
    listed = await world.cli("sessions", "--owner", "alice", "list", "--tag", "home", "--title", marker)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [ids[2], ids[1]]


async def test_the_command_line_updates_and_deletes_sessions_with_the_audit_naming_the_operator(
    world: World,
) -> None:
    async with world.client("alice") as alice:
        sid = (await call(alice, "start_session", agent="demo", message="for the operator"))["session_id"]
    updated = await world.cli("sessions", "update", sid, "--title", "From the CLI", "--tags", "ops", "cli")
    assert updated.returncode == 0, updated.stderr
    async with world.client("alice") as alice:
        view = await call(alice, "get_session", session_id=sid)
    assert (view["title"], view["tags"]) == ("From the CLI", ["ops", "cli"])
    bad = await world.cli("sessions", "update", sid, "--tags", "not ok")
    assert bad.returncode == 1 and "'tags'" in bad.stderr
    deleted = await world.cli("sessions", "delete", sid)
    assert deleted.returncode == 0, deleted.stderr
    assert all(count == 0 for count in world.rows_of(sid).values())
    assert world.audit_of(sid)[-1] == ("cli", "delete_session")
    again = await world.cli("sessions", "delete", sid)
    assert again.returncode == 1 and "no session" in again.stderr
