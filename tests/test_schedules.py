"""Schedules in the test's process (parley.testing, the composition root of `parley serve`), on a
clock the test moves (ManualClock) and one pass of the schedule runner at a time (`run_due`), so
no test sleeps: one session per tick across two replicas on SQLite and PostgreSQL, overlap skip
and queue, catch-up after a downtime, and the configuration's errors. The tools and /v1:
tests/test_schedule_tools.py; three replicas with one SIGKILLed: tests/test_e2e_schedules.py."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest
import yaml
from mcp import Client

from parley.cli import main
from parley.config import load_config
from parley.core.schedules import Timing
from parley.errors import ConfigErrors
from parley.testing import FAST_RUNTIME, HeldModel, ManualClock, ParleyUnderTest, call, eventually, parley_app
from tests.support import Database, db_rows

pytestmark = pytest.mark.anyio

# A whole ten seconds and a half: the tick of every 10 s schedule is half a second old.
T0 = 1_800_000_000.5


def every_10s(message: str, **fields: Any) -> dict[str, Any]:
    return {"every": "10s", "agent": "demo", "message": message, **fields}


async def scheduled(client: Client, name: str) -> list[dict[str, Any]]:
    page = await call(client, "list_sessions", tag=f"schedule:{name}", limit=100)
    return list(page["sessions"])


async def passes(parley: ParleyUnderTest, n: int = 2) -> None:
    """`n` passes of the runner (the app's own loop may run others: a tick is claimed once)."""
    for _ in range(n):
        await parley.app.schedules.run_due()


@asynccontextmanager
async def replicas(
    config: dict[str, Any], database: Database, clock: ManualClock, count: int = 2, **options: Any
) -> AsyncIterator[list[ParleyUnderTest]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(parley_app(config, db=database.db_arg, clock=clock, **options))
            for _ in range(count)
        ]


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_each_tick_starts_one_session_across_replicas_tagged_with_the_schedule(
    database: Database,
) -> None:
    clock = ManualClock(T0)
    config = {
        "storage": database.storage(),
        "schedules": {"tick": every_10s("tick", overlap="allow", tags=["ops"])},
    }
    async with replicas(config, database, clock) as (first, second), first.mcp() as client:
        async with anyio.create_task_group() as tg:
            for replica in (first, second, first, second):
                tg.start_soon(passes, replica)
        sessions = await scheduled(client, "tick")
        assert len(sessions) == 1, sessions
        assert sessions[0]["tags"] == ["schedule:tick", "ops"]
        for n in range(2, 5):
            clock.advance(10)
            async with anyio.create_task_group() as tg:
                tg.start_soon(passes, first)
                tg.start_soon(passes, second)
            assert len(await scheduled(client, "tick")) == n
        view = await call(client, "get_session", session_id=sessions[0]["session_id"])
        assert view["owner"] == "local" and "schedule:tick" in view["tags"]
        # Old ticks go; the latest stays, so no tick runs twice.
        assert await first.app.store.prune_ticks(clock() + 1) == 3
        await passes(first)
        assert len(await scheduled(client, "tick")) == 4
        clock.advance(10)
        await passes(second)
        assert len(await scheduled(client, "tick")) == 5


async def test_overlap_skip_starts_nothing_while_the_previous_session_runs(tmp_path: Path) -> None:
    model = HeldModel()
    held = model.hold("slow")
    clock = ManualClock(T0)
    config = {"schedules": {"slow": every_10s("slow work")}}
    async with (
        parley_app(config, clock=clock, model=model, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        await passes(parley)
        (first,) = await scheduled(client, "slow")
        for _ in range(3):
            clock.advance(10)
            await passes(parley)
            assert [s["session_id"] for s in await scheduled(client, "slow")] == [first["session_id"]]
        held.release()
        await settled(client, first["session_id"])
        clock.advance(10)
        await passes(parley)
        assert len(await scheduled(client, "slow")) == 2


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_overlap_queue_runs_one_waiting_tick_when_the_previous_session_ends(database: Database) -> None:
    model = HeldModel()
    held = model.hold("slow")
    clock = ManualClock(T0)
    config = {
        "storage": database.storage(),
        "schedules": {"queued": every_10s("slow queued", overlap="queue")},
    }
    async with (
        parley_app(config, db=database.db_arg, clock=clock, model=model) as parley,
        parley.mcp() as client,
    ):
        await passes(parley)
        (first,) = await scheduled(client, "queued")
        for _ in range(3):  # one tick waits, the two after it are skipped
            clock.advance(10)
            await passes(parley)
        assert len(await scheduled(client, "queued")) == 1
        held.release()
        await settled(client, first["session_id"])
        await passes(parley)
        assert len(await scheduled(client, "queued")) == 2
        await passes(parley)
        assert len(await scheduled(client, "queued")) == 2


async def settled(client: Client, session_id: str) -> None:
    async def idle() -> bool:
        return bool((await call(client, "get_session", session_id=session_id))["status"] == "idle")

    await eventually(idle, f"session {session_id} to answer")


async def test_catch_up_once_after_a_ten_tick_downtime_gives_one_session_and_skip_none(
    tmp_path: Path,
) -> None:
    config = {
        "schedules": {
            "once": every_10s("catch up", catch_up="once"),
            "skip": every_10s("do not catch up"),
        }
    }
    async with (
        parley_app(config, clock=ManualClock(T0), directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        await passes(parley)
        assert len(await scheduled(client, "once")) == len(await scheduled(client, "skip")) == 1
    # Down for ten ticks and a half: the latest tick is 5 s late, missed.
    clock = ManualClock(T0 + 105)
    async with parley_app(config, clock=clock, directory=tmp_path) as parley, parley.mcp() as client:
        await passes(parley, 3)
        assert len(await scheduled(client, "once")) == 2
        assert len(await scheduled(client, "skip")) == 1
        clock.advance(5)  # the next tick, on time: both run it
        await passes(parley)
        assert len(await scheduled(client, "once")) == 3
        assert len(await scheduled(client, "skip")) == 2


def errors_of(tmp_path: Path, schedules: dict[str, Any], **more: Any) -> list[str]:
    path = tmp_path / "parley.yaml"
    path.write_text(yaml.safe_dump({"schedules": schedules, **more}))
    try:
        load_config(path, None)
    except ConfigErrors as exc:
        return [str(e) for e in exc.errors]
    return []


async def test_a_schedule_with_input_starts_a_task_session_with_those_inputs(tmp_path: Path) -> None:
    reporter = {
        "kinds": ["task"],
        "input_schema": {
            "type": "object",
            "properties": {"region": {"type": "string"}},
            "required": ["region"],
        },
        "result": {"type": "object", "properties": {"summary": {"type": "string"}}},
    }
    schedule = {
        "every": "10s",
        "agent": "reporter",
        "input": {"region": "eu-west"},
        "message": '/result {"summary": "all quiet"}',
    }
    clock = ManualClock(T0)
    config = {"schedules": {"report": schedule}}
    async with (
        parley_app(config, clock=clock, agents={"reporter": reporter}, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        await passes(parley)
        (started,) = await scheduled(client, "report")

        async def completed() -> bool:
            view = await call(client, "get_session", session_id=started["session_id"])
            return bool(view["status"] == "completed")

        await eventually(completed, "the scheduled task to complete")
        view = await call(client, "get_session", session_id=started["session_id"])
    assert view["kind"] == "task" and view["inputs"] == {"region": "eu-west"}, view
    assert view["result"] == {"summary": "all quiet"}, view


def test_configuration_errors_name_the_schedule_field_and_fix(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"cron": "0 8 * *", "agent": "demo", "message": "m"}, "PARLEY-C022", "schedules.x.cron"),
        (
            {"cron": "0 8 * * *", "timezone": "Mars/Olympus", "agent": "demo", "message": "m"},
            "PARLEY-C022",
            "schedules.x.timezone",
        ),
        ({"every": "soon", "agent": "demo", "message": "m"}, "PARLEY-C022", "schedules.x.every"),
        (
            {"every": "2s", "agent": "demo", "message": "m"},
            "PARLEY-C023",
            "lower runtime.schedule_min_interval_s",
        ),
        ({"every": "1m", "agent": "nobody", "message": "m"}, "PARLEY-C024", "schedules.x.agent"),
        ({"every": "1m", "agent": "demo", "input": {"a": 1}}, "PARLEY-C024", "schedules.x.input"),
        ({"every": "1m", "cron": "* * * * *", "agent": "demo", "message": "m"}, "PARLEY-C002", "not both"),
        ({"every": "1m", "agent": "demo", "overlap": "sometimes", "message": "m"}, "PARLEY-C002", "overlap"),
        (
            {"every": "1m", "agent": "demo", "message": "m", "tags": ["no spaces"]},
            "PARLEY-C002",
            "is not a tag",
        ),
        ({"every": "1m", "agent": "demo", "message": ""}, "PARLEY-C002", "schedules.x.message"),
    ]
    for fields, code, said in cases:
        found = errors_of(tmp_path, {"x": fields})
        assert len(found) == 1 and code in found[0] and said in found[0], (fields, found)
    assert errors_of(tmp_path, {"bad name!": every_10s("m")})[0].startswith("PARLEY-C022")
    fast = {"runtime": {"schedule_min_interval_s": 1}}
    assert errors_of(tmp_path, {"x": {"every": "1s", "agent": "demo", "message": "m"}}, **fast) == []
    assert "PARLEY-C002" in errors_of(tmp_path, {}, runtime={"schedule_min_interval_s": 0.5})[0]
    dst = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "agent": "demo", "message": "m"}
    assert errors_of(tmp_path, {"nightly": dst}) == []


def test_cron_ticks_follow_daylight_saving_changes() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    nightly = Timing(cron="30 2 * * *", tz="Europe/Berlin")

    def local(ts: float | None) -> str:
        assert ts is not None
        return datetime.fromtimestamp(ts, berlin).isoformat()

    # 28 March 2027: 02:30 does not exist (the clocks go from 02:00 to 03:00): it runs at 03:00.
    spring = datetime(2027, 3, 27, 12, tzinfo=berlin).timestamp()
    ticks = [nightly.next_after(spring)]
    ticks.append(nightly.next_after(ticks[-1] or 0))
    assert [local(t) for t in ticks] == ["2027-03-28T03:00:00+02:00", "2027-03-29T02:30:00+02:00"]
    # 31 October 2027: 02:30 comes twice; it runs once.
    autumn = nightly.next_after(datetime(2027, 10, 30, 12, tzinfo=berlin).timestamp())
    after = nightly.next_after(autumn or 0)
    assert local(autumn) == "2027-10-31T02:30:00+02:00" and local(after) == "2027-11-01T02:30:00+01:00"
    assert nightly.latest_at_or_before((after or 0) - 1) == autumn


def test_parley_replay_starts_no_schedule_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`parley replay` (and `parley eval`) run the engine in their own process on the database: it
    drives their sessions and starts no schedule's."""
    path = tmp_path / "parley.yaml"
    schedule = {"every": "1s", "agent": "demo", "message": "tick", "overlap": "allow"}
    fields = {
        "storage": {"path": "parley.db"},
        "runtime": {**FAST_RUNTIME, "schedule_min_interval_s": 1},
        "schedules": {"tick": schedule},
    }
    path.write_text(yaml.safe_dump(fields))

    async def original() -> str:
        # An hour ago, on a clock of its own: the schedule's tick of then starts one session.
        async with (
            parley_app(path, clock=ManualClock(time.time() - 3600.5)) as parley,
            parley.mcp() as client,
        ):
            await passes(parley)
            started = await call(client, "start_session", agent="demo", message="hello")
            return str(started["session_id"])

    sid = anyio.run(original)
    assert main(["replay", sid, "--config", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["original"] == sid
    tagged = db_rows(
        tmp_path / "parley.db", "SELECT count(*) FROM sessions WHERE tags LIKE '%schedule:tick%'"
    )
    assert tagged == [(1,)]
