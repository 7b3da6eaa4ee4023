"""Retention end to end against one parley served over HTTP (in this process) whose policy counts in seconds (ages are
days with fractions, the sweep runs every 0.1 s), on SQLite and on PostgreSQL: closed and idle
sessions past their age leave no row in any session table and an audit entry by "retention";
sessions waiting for a person or running a turn, and younger ones, are kept; events past their
age go while the transcript stays, and a stream resumed from before the cut gets `reset`.
`parley db vacuum` (a command line) is tests/test_e2e_retention.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import database_for
from tests.sse_support import heartbeat, read_until
from tests.support import Database, InProcessServer, call, eventually, write_config

pytestmark = pytest.mark.anyio

DAY_S = 86_400
ENDED_AFTER_S = 1.0
IDLE_AFTER_S = 2.0
EVENTS_AFTER_S = 1.0
AGENTS: dict[str, dict[str, Any]] = {"helper": {"tools": ["ask_user"]}}


@dataclass
class World:
    server: InProcessServer
    database: Database

    @property
    def base(self) -> str:
        return self.server.base_url

    def count(self, table: str, session_id: str, column: str = "session_id") -> int:
        return int(
            self.database.rows(f"SELECT count(*) FROM {table} WHERE {column} = ?", (session_id,))[0][0]
        )

    def rows_of(self, session_id: str) -> dict[str, int]:
        """One query per session table (every table with a session_id column but the audit)."""
        if self.database.kind == "sqlite":
            names = [r[0] for r in self.database.rows("SELECT name FROM sqlite_master WHERE type = 'table'")]
            tables = [
                t
                for t in names
                if any(c[1] == "session_id" for c in self.database.rows(f"PRAGMA table_info({t})"))
            ]
        else:
            tables = [
                r[0]
                for r in self.database.rows(
                    "SELECT table_name FROM information_schema.columns WHERE table_schema = ? AND column_name = 'session_id'",
                    (self.database.schema,),
                )
            ]
        counts = {t: self.count(t, session_id) for t in tables if t != "audit"}
        counts["sessions"] = self.count("sessions", session_id, "id")
        return counts

    def audit_of(self, session_id: str) -> list[tuple[str, str, str]]:
        rows = self.database.rows(
            "SELECT principal, action, outcome FROM audit WHERE session_id = ? ORDER BY id", (session_id,)
        )
        return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
async def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    directory: Path = tmp_path_factory.mktemp(f"retention_{request.param}")
    with database_for(request.param, directory, "retention") as database:
        config = write_config(
            directory,
            agents=AGENTS,
            database=database,
            retention={
                "ended_sessions_after_days": ENDED_AFTER_S / DAY_S,
                "idle_sessions_after_days": IDLE_AFTER_S / DAY_S,
                "events_after_days": EVENTS_AFTER_S / DAY_S,
                "interval_s": 0.1,
                "batch_size": 2,
            },
            http={"stream_heartbeat_s": 0.2},
        )
        async with InProcessServer(config, http=True, db=database.db_arg) as server:
            yield World(server, database)
            assert "Traceback" not in server.log(), server.log()


async def _waiting(client: Client) -> str:
    parked = await call(client, "start_session", agent="helper", message="/ask Which one? | a | b")
    assert parked["status"] == "waiting_for_input"
    return str(parked["session_id"])


async def test_closed_and_idle_sessions_past_their_age_are_removed_whole_and_audited_the_rest_kept(
    world: World,
) -> None:
    async with world.server.client() as client:
        closed = [
            (await call(client, "start_session", agent="demo", message=f"close {i}"))["session_id"]
            for i in range(3)
        ]
        for sid in closed:
            await call(client, "close_session", session_id=sid)
        idle = (await call(client, "start_session", agent="demo", message="then rest"))["session_id"]
        waiting = await _waiting(client)
        running = (
            await call(client, "start_session", agent="demo", message="/sleep 600\nbusy", wait_seconds=0)
        )["session_id"]
        assert world.rows_of(idle)["messages"] > 0

        async def removed() -> bool:
            return all(world.rows_of(sid)["sessions"] == 0 for sid in [*closed, idle])

        await eventually(removed, "the closed and the idle sessions to be removed")
        for sid in [*closed, idle]:
            assert all(n == 0 for n in world.rows_of(sid).values()), (sid, world.rows_of(sid))
            assert world.audit_of(sid)[-1] == ("retention", "retention", "ok")
        # Past every age by now, but waiting for a person or running a turn: kept, and usable.
        assert world.rows_of(waiting)["sessions"] == 1 and world.rows_of(waiting)["messages"] > 0
        state = await call(client, "get_session", session_id=running)
        assert state["status"] == "running"
        await call(client, "cancel_turn", session_id=running)
        view = await call(client, "get_session", session_id=waiting)
        [question] = view["pending"]
        answered = await call(
            client, "answer_question", session_id=waiting, interrupt_id=question["id"], answer="a"
        )
        assert answered["status"] == "answered"


async def test_old_events_go_the_transcript_stays_and_a_stream_resumed_before_the_cut_gets_reset(
    world: World,
) -> None:
    async with world.server.client() as client:
        sid = await _waiting(client)
        latest = world.count("events", sid)
        messages = world.count("messages", sid)
        assert latest > 2

        async def purged() -> bool:
            return world.count("events", sid) == 0

        await eventually(purged, "the session's events to pass their age")
        assert world.count("messages", sid) == messages, "the transcript stays"
        assert world.count("sessions", sid, "id") == 1
        view = await call(client, "get_session", session_id=sid, messages_from=1)
        assert view["total_messages"] == messages and view["status"] == "waiting_for_input"

    url = f"{world.base}/v1/sessions/{sid}/events"
    seen = await read_until(url, heartbeat, headers={"Last-Event-ID": "1"})
    assert seen[0].kind == "reset" and seen[0].data["latest_seq"] == latest, seen
    assert seen[1].kind == "state" and seen[1].id == latest
    assert seen[1].data["session"]["status"] == "waiting_for_input"
