"""Outbound webhooks end to end: a real receiver on loopback (tests/webhook_support.py) gets
every event of real sessions, signed so that the standardwebhooks package's own verifier takes
it, once each even when it failed the first attempts, with the same ids; a receiver at a
private address is refused without the allowance; a delivery written before a process stopped
is delivered by the next; dead deliveries are listed and sent again from the command line."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from standardwebhooks import Webhook

from parley.cli import main as parley_main
from parley.core.webhooks import DeliveryRecord
from parley.testing import ParleyUnderTest, ToolServer, eventually, parley_app
from tests.store_support import get_delivery
from tests.support import Database
from tests.webhook_support import SECRET, Receiver, serving_receiver

pytestmark = pytest.mark.anyio

SECRET_ENV = "PARLEY_TEST_WEBHOOK_SECRET"
ALL_EVENTS = ["session.waiting_for_input", "turn.ended", "turn.failed", "session.completed", "session.failed"]
FAST_RETRY = {"retry_base_s": 0.05, "retry_max_s": 0.2}
PLANNER = {"tools": ["write_todos"], "plan_mode": True}


@contextmanager
def secret_set(value: str | None = SECRET) -> Iterator[None]:
    before = os.environ.get(SECRET_ENV)
    if value is None:
        os.environ.pop(SECRET_ENV, None)
    else:
        os.environ[SECRET_ENV] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = before


def subscription(url: str, **fields: Any) -> dict[str, Any]:
    return {"url": url, "events": ALL_EVENTS, "secret_env": SECRET_ENV, **FAST_RETRY, **fields}


@dataclass
class World:
    parley: ParleyUnderTest
    receiver: Receiver
    directory: Path

    async def deliveries(self) -> list[DeliveryRecord]:
        return await self.parley.app.store.list_deliveries(None, 1000)

    async def settled(self, subscription: str, count: int) -> list[DeliveryRecord]:
        async def done() -> bool:
            found = [d for d in await self.deliveries() if d.subscription == subscription]
            return len(found) >= count and all(d.status != "pending" for d in found)

        await eventually(done, f"{count} deliveries of {subscription} settled")
        return [d for d in await self.deliveries() if d.subscription == subscription]


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("webhooks")
    receiver = Receiver(failures={"/flaky": 3, "/always-fails": -1}, redirects={"/moved"})
    async with serving_receiver(receiver):
        config = {
            "runtime": {"max_model_attempts": 1},
            "webhooks": {
                "flaky": subscription(receiver.url("/flaky"), allow_private=True, max_attempts=10),
                "blocked": subscription(receiver.url("/blocked"), max_attempts=1),
                "moved": subscription(receiver.url("/moved"), allow_private=True, max_attempts=1),
                "dead-end": subscription(
                    receiver.url("/always-fails"),
                    events=["session.completed"],
                    allow_private=True,
                    max_attempts=2,
                ),
            },
        }
        with secret_set():
            async with parley_app(config, directory=directory, agents={"planner": PLANNER}) as parley:
                yield World(parley, receiver, directory)
                assert "Traceback" not in parley.log(), parley.log()


async def cli(argv: list[str]) -> int:
    """The command line, in a thread (it runs an event loop of its own)."""
    return await anyio.to_thread.run_sync(parley_main, argv)


async def start(world: World, **body: Any) -> dict[str, Any]:
    endpoint = await world.parley.http()
    async with endpoint.client() as http:
        response = await http.post("/v1/sessions", json={"agent": "demo", "wait_seconds": 30, **body})
    assert response.status_code == 201, response.text
    started: dict[str, Any] = response.json()
    return started


async def test_a_receiver_that_fails_three_times_gets_every_event_once_with_the_same_ids(
    world: World,
) -> None:
    chat = await start(world, message="hello")
    asked = await start(world, message="/ask Deploy now? | yes | no")
    failed = await start(world, message="/fail forever")
    task = await start(world, kind="task", message='/result {"summary": "done"}')
    todos = {"todos": [{"content": "step one"}]}
    planned = await start(world, agent="planner", message=f"/tool write_todos {json.dumps(todos)}")

    flaky = await world.settled("flaky", 7)
    received = world.receiver.at("/flaky")
    ok = [r for r in received if r.status == 200]
    failures = [r for r in received if r.status == 500]

    assert all(d.status == "delivered" for d in flaky)
    # Every delivery arrived once, under the id the outbox gave it; the failed attempts were
    # attempts of those same deliveries.
    assert sorted(r.id for r in ok) == sorted(d.id for d in flaky)
    assert len(failures) == 3 and {r.id for r in failures} <= {r.id for r in ok}
    kinds = sorted((r.payload["type"], r.payload["data"]["session_id"]) for r in ok)
    assert kinds == sorted(
        [
            ("turn.ended", chat["session_id"]),
            ("session.waiting_for_input", asked["session_id"]),
            ("turn.failed", failed["session_id"]),
            ("turn.ended", task["session_id"]),
            ("session.completed", task["session_id"]),
            ("turn.ended", planned["session_id"]),
            ("session.waiting_for_input", planned["session_id"]),
        ]
    )
    # The package's own verifier takes every request, and a changed body is refused.
    verifier = Webhook(SECRET)
    for request in ok:
        assert verifier.verify(request.body, request.headers) == request.payload
    with pytest.raises(Exception, match="signature"):
        verifier.verify(ok[0].body.replace(b"session", b"sessiom"), ok[0].headers)
    by_type = {r.payload["type"]: r.payload for r in ok}
    assert by_type["session.completed"]["data"]["result"] == {"summary": "done"}
    waiting = {r.payload["data"]["reason"] for r in ok if r.payload["type"] == "session.waiting_for_input"}
    assert waiting == {"question", "plan"}
    assert by_type["turn.failed"]["data"]["status"] == "failed"


async def test_a_failed_task_and_a_pending_approval_each_fire_their_event(tmp_path: Path) -> None:
    tools = ToolServer("ops")

    @tools.tool(destructive=True)
    async def deploy(target: str) -> str:
        return f"deployed {target}"

    async with serving_receiver(Receiver()) as receiver, tools.serve():
        config = {
            "runtime": {"max_model_attempts": 1},
            "mcp_servers": {"ops": tools.entry},
            "webhooks": {"hook": subscription(receiver.url("/hook"), allow_private=True)},
        }
        agents = {"deployer": {"mcp_servers": ["ops"]}}
        with secret_set():
            async with parley_app(config, directory=tmp_path, agents=agents) as parley:
                world = World(parley, receiver, tmp_path)
                failed = await start(world, kind="task", message="/fail forever")
                parked = await start(world, agent="deployer", message='/tool ops__deploy {"target": "prod"}')
                assert parked["status"] == "waiting_for_input", parked
                await world.settled("hook", 3)
    events = sorted((r.payload["type"], r.payload["data"]["session_id"]) for r in receiver.at("/hook", 200))
    assert events == sorted(
        [
            ("turn.failed", failed["session_id"]),
            ("session.failed", failed["session_id"]),
            ("session.waiting_for_input", parked["session_id"]),
        ]
    )
    by_type = {r.payload["type"]: r.payload["data"] for r in receiver.at("/hook", 200)}
    assert by_type["session.failed"]["status"] == "failed" and by_type["session.failed"]["error"]
    waiting = by_type["session.waiting_for_input"]
    assert waiting["reason"] == "approval", waiting
    assert [waiting["interrupt_id"]] == [p["id"] for p in parked["pending"]], (waiting, parked)
    assert tools.ran("deploy") == [], "the approval was never given"


async def test_a_receiver_at_a_private_address_is_refused_without_the_allowance(world: World) -> None:
    await start(world, message="to nobody private")
    blocked = await world.settled("blocked", 1)

    assert world.receiver.at("/blocked") == []
    assert all(d.status == "dead" and "loopback" in (d.last_error or "") for d in blocked)
    assert "allow_private" in (blocked[0].last_error or "")


async def test_a_redirect_is_not_followed(world: World) -> None:
    moved = await world.settled("moved", 1)
    assert all(d.status == "dead" and "redirects are not followed" in (d.last_error or "") for d in moved)
    assert {r.status for r in world.receiver.at("/moved")} == {307}
    assert world.receiver.at("/elsewhere") == []


async def test_an_eval_session_fires_no_webhook(world: World) -> None:
    endpoint = await world.parley.http()
    silent = await start(world)
    sid = silent["session_id"]
    async with endpoint.client() as http:
        tagged = await http.patch(f"/v1/sessions/{sid}", json={"tags": ["eval"]})
        assert tagged.status_code == 200, tagged.text
        sent = await http.post(f"/v1/sessions/{sid}/messages", json={"message": "quiet", "wait_seconds": 30})
        assert sent.status_code == 200, sent.text
    later = (await start(world, message="after the eval"))["session_id"]

    async def later_one_written() -> bool:
        return any(d.session_id == later for d in await world.deliveries())

    # Written in the commit of the later turn's end, after the eval session's turns had ended.
    await eventually(later_one_written, "a later session's delivery")
    assert all(d.session_id != sid for d in await world.deliveries())


async def test_dead_deliveries_are_listed_and_sent_again_with_the_same_id(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    await start(world, kind="task", message='/result {"summary": "for the dead end"}')
    dead = [d for d in await world.settled("dead-end", 1) if d.status == "dead"]
    assert dead and dead[0].attempts == 2
    db = ["--db", str(world.parley.config.db_path)]

    assert await cli(["webhooks", "list", "--status", "dead", *db]) == 0
    listed = capsys.readouterr().out
    assert dead[0].id in listed and "dead-end" in listed and "HTTP 500" in listed

    world.receiver.failures["/always-fails"] = 0
    assert await cli(["webhooks", "redeliver", dead[0].id, *db]) == 0
    assert "pending again" in capsys.readouterr().out

    async def delivered() -> bool:
        again = await get_delivery(world.parley.app.store, dead[0].id)
        return again is not None and again.status == "delivered"

    await eventually(delivered, "the redelivered delivery delivered")
    assert [r.status for r in world.receiver.at("/always-fails") if r.id == dead[0].id][-1] == 200
    assert await cli(["webhooks", "redeliver", "whd_nothing", *db]) == 1


async def test_metrics_count_attempts_and_deliveries_by_status(world: World) -> None:
    await world.settled("flaky", 1)
    endpoint = await world.parley.http()
    async with endpoint.client() as http:
        text = (await http.get("/metrics")).text
    assert 'parley_webhook_attempts_total{outcome="delivered",subscription="flaky"}' in text
    assert 'parley_webhook_attempts_total{outcome="failed",subscription="flaky"} 3.0' in text
    assert 'parley_webhook_deliveries{scope="database",status="dead"}' in text


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_a_delivery_committed_before_the_process_stopped_is_delivered_by_the_next(
    tmp_path: Path, database: Database
) -> None:
    async with serving_receiver() as receiver:
        config = {
            "storage": database.storage(),
            "webhooks": {"after": subscription(receiver.url("/after"), allow_private=True)},
        }
        # The first process commits the turn and its delivery but cannot sign it (no secret), so
        # it stops with the delivery unsent, as a crash right after the commit would leave it.
        with secret_set(None):
            async with parley_app(config, db=database.db_arg, directory=tmp_path) as first:
                await start(World(first, receiver, tmp_path), message="before the stop")
                written = await first.app.store.list_deliveries(None, 10)
        assert [d.status for d in written] == ["pending"] and receiver.received == []
        with secret_set():
            async with parley_app(config, db=database.db_arg, directory=tmp_path) as second:
                await World(second, receiver, tmp_path).settled("after", 1)

    assert [r.id for r in receiver.received] == [written[0].id]
    assert (
        Webhook(SECRET).verify(receiver.received[0].body, receiver.received[0].headers)["type"]
        == "turn.ended"
    )
