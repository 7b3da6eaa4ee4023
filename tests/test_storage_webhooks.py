# ruff: noqa: F811
"""The outbox's contract on every backend: a decision writes the deliveries of its events for
the subscriptions that take them, in its own transaction; a delivery is claimed by one process
at a time (another takes it only once the claim lapsed); an outcome is written only by the
claim's holder; a dead delivery is listed and made pending again. The backends and fixtures are
the storage contract's (tests/test_storage_contract.py)."""

from __future__ import annotations

import json

import pytest

from parley.config.retention import RetentionConfig
from parley.core.webhooks import DeliveryStatus, OutboxRoute
from parley.runtime.retention import DAY_S, RetentionSweep
from parley.storage.ports import Store
from tests.store_support import get_delivery
from tests.test_storage_contract import LEASE_A, T0, _finish, running_turn

# The contract's backends, as its fixtures (see tests/test_storage_access_contract.py).
from tests.test_storage_contract import backend, other_store, store  # noqa: F401  # isort: skip

pytestmark = pytest.mark.anyio

ROUTES = [
    OutboxRoute("ends", frozenset({"turn.ended", "turn.failed"})),
    OutboxRoute("failures", frozenset({"turn.failed"})),
]


async def test_a_turns_end_writes_a_delivery_for_each_subscription_that_takes_it(store: Store) -> None:
    quiet, quiet_turn = await running_turn(store)
    await _finish(store, quiet, LEASE_A, quiet_turn.id, "answered", "hi", None, T0 + 2)
    assert await store.list_deliveries(None, 10) == []  # no routes: nothing written

    store.route_webhooks(ROUTES)
    sid, turn = await running_turn(store, "second")
    await _finish(store, sid, LEASE_A, turn.id, "failed", None, "the model failed", T0 + 2)

    written = sorted(await store.list_deliveries(None, 10), key=lambda d: d.subscription)
    assert [(d.subscription, d.event_type, d.status, d.attempts) for d in written] == [
        ("ends", "turn.failed", "pending", 0),
        ("failures", "turn.failed", "pending", 0),
    ]
    body = json.loads(written[0].payload)
    assert body["type"] == "turn.failed" and body["data"]["session_id"] == sid
    assert body["data"]["turn_id"] == turn.id and body["data"]["error"] == "the model failed"
    assert written[0].id != written[1].id and written[0].payload == written[1].payload


async def test_a_delivery_is_claimed_by_one_process_until_its_claim_lapses(
    store: Store, other_store: Store
) -> None:
    store.route_webhooks(ROUTES)
    sid, turn = await running_turn(store)
    await _finish(store, sid, LEASE_A, turn.id, "answered", "hi", None, T0 + 2)
    now = T0 + 3

    mine = await store.claim_deliveries(["ends"], "proc_a", now, 10.0, 10)
    assert len(mine) == 1 and await other_store.claim_deliveries(["ends"], "proc_b", now, 10.0, 10) == []
    assert (
        await other_store.claim_deliveries(["failures"], "proc_b", now, 10.0, 10) == []
    )  # none of its events

    # proc_a stalled past its claim: proc_b takes the delivery, and proc_a's late outcome is refused.
    theirs = await other_store.claim_deliveries(["ends"], "proc_b", now + 11, 10.0, 10)
    assert [d.id for d in theirs] == [mine[0].id]
    assert await store.settle_delivery(mine[0].id, "proc_a", "delivered", now + 12) is False
    assert await other_store.settle_delivery(theirs[0].id, "proc_b", "delivered", now + 12) is True
    done = await get_delivery(store, mine[0].id)
    assert done is not None and (done.status, done.attempts, done.delivered_at) == ("delivered", 1, now + 12)
    assert await store.claim_deliveries(["ends"], "proc_a", now + 100, 10.0, 10) == []


async def test_a_failed_attempt_waits_and_a_dead_delivery_is_sent_again_with_its_id(store: Store) -> None:
    store.route_webhooks(ROUTES[:1])
    sid, turn = await running_turn(store)
    await _finish(store, sid, LEASE_A, turn.id, "answered", "hi", None, T0 + 2)
    [claimed] = await store.claim_deliveries(["ends"], "proc_a", T0 + 3, 10.0, 10)
    await store.settle_delivery(
        claimed.id, "proc_a", "pending", T0 + 4, next_attempt_at=T0 + 60, error="HTTP 503"
    )
    assert await store.claim_deliveries(["ends"], "proc_a", T0 + 59, 10.0, 10) == []  # not due yet
    [again] = await store.claim_deliveries(["ends"], "proc_a", T0 + 60, 10.0, 10)
    await store.settle_delivery(again.id, "proc_a", "dead", T0 + 61, error="HTTP 500 " + "x" * 1000)

    [dead] = await store.list_deliveries("dead", 10)
    assert (dead.id, dead.attempts) == (claimed.id, 2) and len(dead.last_error or "") == 300
    assert await store.delivery_counts() == {"dead": 1}
    redelivered = await store.redeliver(dead.id, T0 + 70)
    assert redelivered is not None and (redelivered.status, redelivered.attempts) == ("pending", 0)
    assert redelivered.payload == dead.payload
    assert [d.id for d in await store.claim_deliveries(["ends"], "proc_b", T0 + 70, 10.0, 10)] == [dead.id]
    assert await store.redeliver("whd_nothing", T0 + 70) is None


async def test_retention_removes_settled_deliveries_past_their_age_and_keeps_pending_ones(
    store: Store,
) -> None:
    store.route_webhooks(ROUTES)
    for name in ("one", "two", "three"):
        sid, turn = await running_turn(store, name)
        await _finish(store, sid, LEASE_A, turn.id, "failed", None, "the model failed", T0 + 2)
    # Six deliveries: two delivered and two dead at T0 + 10, one delivered at T0 + 500, one pending.
    claimed = await store.claim_deliveries(["ends", "failures"], "proc_a", T0 + 3, 10.0, 10)
    assert len(claimed) == 6
    outcomes: list[tuple[DeliveryStatus, float]] = [
        ("delivered", T0 + 10),
        ("delivered", T0 + 10),
        ("dead", T0 + 10),
        ("dead", T0 + 10),
        ("delivered", T0 + 500),
    ]
    for delivery, (status, at) in zip(claimed, outcomes, strict=False):
        await store.settle_delivery(delivery.id, "proc_a", status, at)
    pending = claimed[-1]
    await store.settle_delivery(pending.id, "proc_a", "pending", T0 + 10, next_attempt_at=T0 + 9999)

    # An age of 100 s at T0 + 200: the four settled at T0 + 10 go, in batches of 3.
    config = RetentionConfig(webhook_deliveries_after_days=100 / DAY_S, batch_size=3)
    report = await RetentionSweep(store, config, lambda: T0 + 200).sweep()
    assert (report.deliveries, report.batches, report.sessions, report.events) == (4, 2, 0, 0)
    kept = {d.id: d.status for d in await store.list_deliveries(None, 10)}
    assert kept == {claimed[4].id: "delivered", pending.id: "pending"}
    # Long after, the pending delivery still stays: it has not been sent.
    report = await RetentionSweep(store, config, lambda: T0 + 10_000).sweep()
    assert report.deliveries == 1
    assert [d.id for d in await store.list_deliveries(None, 10)] == [pending.id]
