"""The schedule tools and /v1/schedules, served over HTTP in the test's process with static tokens
(an admin, `ops`, and a user, `alice`): only an admin manages schedules, every bad argument is
refused naming its field and stores nothing, parley.yaml's schedules are read-only, a schedule
made for another principal starts sessions that principal owns, and a name in both parley.yaml
and the database keeps `parley serve` from starting (PARLEY-C025)."""

from __future__ import annotations

import gc
import secrets
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from parley.errors import ConfigErrors
from parley.testing import ManualClock, ParleyUnderTest, call, call_error, parley_app
from tests.auth_support import token_client
from tests.support import db_rows, tokens_auth

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.5
CONFIGURED = {"every": "1m", "agent": "demo", "message": "from the file"}


def config_of(tokens: dict[str, str], schedules: dict[str, Any]) -> dict[str, Any]:
    auth = tokens_auth({"alice": tokens["alice"]})
    auth["tokens"] += tokens_auth({"ops": tokens["ops"]}, ("parley:admin",))["tokens"]
    return {"auth": auth, "schedules": schedules}


async def names(client: Client) -> list[str]:
    return [s["name"] for s in (await call(client, "list_schedules"))["schedules"]]


async def test_only_admins_manage_schedules_and_bad_arguments_store_nothing(tmp_path: Path) -> None:
    tokens = {"alice": secrets.token_urlsafe(24), "ops": secrets.token_urlsafe(24)}
    clock = ManualClock(T0)
    config = config_of(tokens, {"from_file": CONFIGURED})
    async with parley_app(config, clock=clock, directory=tmp_path) as parley:
        url = (await parley.http()).url
        async with token_client(url, tokens["alice"]) as alice, token_client(url, tokens["ops"]) as ops:
            for tool, args in [
                ("create_schedule", {"name": "mine", "agent": "demo", "every": "1m", "message": "hi"}),
                ("list_schedules", {}),
                ("pause_schedule", {"name": "from_file"}),
                ("delete_schedule", {"name": "from_file"}),
            ]:
                assert "needs the scope parley:admin" in await call_error(alice, tool, **args)
            await refusals(ops)
            assert await names(ops) == ["from_file"]
            await manage(parley, ops, alice, clock)
            await over_v1(parley, tokens)
    trail = db_rows(
        tmp_path / "parley.db",
        "SELECT action, principal, client, target, outcome FROM audit WHERE action LIKE 'schedule%' "
        "AND (target = 'for_alice' OR client = 'schedule:for_alice') ORDER BY id",
    )
    acts = [(action, principal, outcome) for action, principal, _, _, outcome in trail]
    assert acts == [
        ("schedule", "ops", "ok"),  # created
        ("scheduled_start", "alice", "ok"),
        ("schedule", "ops", "ok"),  # paused
        ("schedule", "ops", "ok"),  # resumed
        ("scheduled_start", "alice", "ok"),
        ("schedule", "ops", "ok"),  # deleted
    ], trail
    refused = db_rows(
        tmp_path / "parley.db",
        "SELECT target FROM audit WHERE action = 'schedule' AND principal = 'alice' AND outcome = 'refused' "
        "ORDER BY id",
    )
    # Her four tool calls and her GET /v1/schedules.
    assert [target for (target,) in refused] == ["mine", None, "from_file", "from_file", None]


async def refusals(ops: Client) -> None:
    good = {"name": "nightly", "agent": "demo", "cron": "0 3 * * *", "message": "hi"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cron": "0 3 * *"}, "'cron'"),
        ({"timezone": "Nowhere/Land"}, "'timezone'"),
        ({"cron": None, "every": "5s"}, "shorter than this server's minimum of 10s"),
        ({"cron": None, "every": "often"}, "'every'"),
        ({"cron": None}, "either cron"),
        ({"agent": "nobody"}, "'agent'"),
        ({"inputs": {"x": 1}}, "takes no inputs"),
        ({"message": None}, "'message'"),
        ({"name": "no spaces"}, "'name'"),
        ({"name": "from_file"}, "is defined in parley.yaml"),
        ({"tags": ["bad tag"]}, "'tags'"),
        ({"overlap": "sometimes"}, "overlap"),
    ]
    for change, said in cases:
        refused = await call_error(ops, "create_schedule", **{**good, **change})
        assert said in refused, (change, refused)
    for tool in ("pause_schedule", "resume_schedule", "delete_schedule"):
        assert "read-only here" in await call_error(ops, tool, name="from_file")
        assert "no schedule named 'gone'" in await call_error(ops, tool, name="gone")


async def manage(parley: ParleyUnderTest, ops: Client, alice: Client, clock: ManualClock) -> None:
    made = await call(
        ops, "create_schedule", name="for_alice", agent="demo", every="10s", message="hello", owner="alice"
    )
    assert made == {"name": "for_alice", "status": "created"}
    assert "exists" in await call_error(
        ops, "create_schedule", name="for_alice", agent="demo", every="1m", message="x"
    )
    await parley.app.schedules.run_due()
    listed = {s["name"]: s for s in (await call(ops, "list_schedules"))["schedules"]}
    mine = listed["for_alice"]
    assert (mine["source"], mine["owner"], mine["created_by"], mine["every_s"]) == (
        "database",
        "alice",
        "ops",
        10.0,
    )
    assert mine["last_run"]["status"] == "started" and mine["next_run"] == "2027-01-15T08:00:10.000Z"
    assert (
        listed["from_file"]["source"] == "config" and listed["from_file"]["last_run"]["status"] == "started"
    )
    # The session is alice's: she sees it as her own.
    page = await call(alice, "list_sessions", tag="schedule:for_alice")
    assert [s["session_id"] for s in page["sessions"]] == [mine["last_run"]["session_id"]]
    assert (await call(ops, "pause_schedule", name="for_alice"))["status"] == "paused"
    clock.advance(10)
    await parley.app.schedules.run_due()
    assert len((await call(alice, "list_sessions", tag="schedule:for_alice"))["sessions"]) == 1
    paused = {s["name"]: s for s in (await call(ops, "list_schedules"))["schedules"]}["for_alice"]
    assert paused["paused"] is True and paused["next_run"] is None
    assert (await call(ops, "resume_schedule", name="for_alice"))["status"] == "resumed"
    clock.advance(10)
    await parley.app.schedules.run_due()
    assert len((await call(alice, "list_sessions", tag="schedule:for_alice"))["sessions"]) == 2
    assert (await call(ops, "delete_schedule", name="for_alice"))["status"] == "deleted"
    assert await names(ops) == ["from_file"]


async def over_v1(parley: ParleyUnderTest, tokens: dict[str, str]) -> None:
    endpoint = await parley.http()
    async with endpoint.client(tokens["alice"]) as alice, endpoint.client(tokens["ops"]) as ops:
        refused = await alice.get("/v1/schedules")
        assert refused.status_code == 403 and refused.json()["type"] == "urn:parley:problem:not-admin"
        body = {
            "name": "weekly",
            "agent": "demo",
            "cron": "0 8 * * 1",
            "timezone": "Europe/Berlin",
            "message": "m",
        }
        unknown = await ops.post("/v1/schedules", json={**body, "colour": "red"})
        assert unknown.status_code == 400 and "colour" in unknown.text
        bad = await ops.post("/v1/schedules", json={**body, "cron": "every monday"})
        assert bad.status_code == 400 and bad.json()["field"] == "cron"
        made = await ops.post("/v1/schedules", json=body)
        assert made.status_code == 201 and made.json() == {"name": "weekly", "status": "created"}
        listed = (await ops.get("/v1/schedules")).json()["schedules"]
        assert [s["name"] for s in listed] == ["from_file", "weekly"]
        assert listed[1]["next_run"] == "2027-01-18T07:00:00.000Z"  # 08:00 in Berlin
        assert (await ops.post("/v1/schedules/weekly/pause")).json()["status"] == "paused"
        assert (await ops.post("/v1/schedules/weekly/resume")).json()["status"] == "resumed"
        assert (await ops.post("/v1/schedules/from_file/pause")).status_code == 400
        assert (await ops.delete("/v1/schedules/weekly")).json()["status"] == "deleted"
        assert (await ops.delete("/v1/schedules/weekly")).status_code == 400


async def test_a_name_in_parley_yaml_and_in_the_database_keeps_the_server_from_starting(
    tmp_path: Path,
) -> None:
    tokens = {"alice": secrets.token_urlsafe(24), "ops": secrets.token_urlsafe(24)}
    async with parley_app(config_of(tokens, {}), directory=tmp_path) as parley:
        url = (await parley.http()).url
        async with token_client(url, tokens["ops"]) as ops:
            await call(ops, "create_schedule", name="clash", agent="demo", every="1h", message="m")
    # The app starts in a task of parley_app's: the error comes in its task group's group.
    with pytest.raises(BaseExceptionGroup) as raised:
        async with parley_app(config_of(tokens, {"clash": CONFIGURED}), directory=tmp_path):
            pass
    gc.collect()  # a stream the refused start left open would be reported here, not in a later test
    refusal = raised.value.exceptions[0]
    assert isinstance(refusal, ConfigErrors)
    (error,) = refusal.errors
    assert "PARLEY-C025" in str(error) and "schedules.clash" in str(error) and "delete_schedule" in str(error)
