"""What only tests ask of a store, kept out of the Store port: one lease taken alone, whether a
steering message waits, the committed steps of a session (read straight from the table), an
owner's running sessions as fair use counts them, and one webhook delivery."""

from __future__ import annotations

from typing import cast

from parley.core.ids import SessionId
from parley.core.records import AuditRecord, EnqueueOutcome, QueuedMessageRecord, StepRecord
from parley.core.webhooks import DeliveryRecord
from parley.runtime.fair_use import Claim
from parley.runtime.session_steps import SessionSteps
from parley.storage.ports import Store
from parley.storage.sql.rows import listing
from parley.storage.sql.store import SqlStore
from parley.storage.sql.usage import RUNNING_OF_OWNER


async def try_acquire_lease(
    store: Store, session_id: SessionId, owner: str, now: float, ttl_s: float
) -> str | None:
    """The session's lease for `owner`, as the scheduler takes it (with others, in one statement)."""
    return (await store.try_acquire_leases([session_id], owner, now, ttl_s)).get(session_id)


async def steer_pending(store: Store, session_id: SessionId) -> bool:
    """A queued message of the session steers its running turn."""
    return any(message.steer for message in await store.list_queued(session_id))


async def list_steps(store: Store, session_id: SessionId) -> list[StepRecord]:
    """The steps committed for the session, in the order they were."""
    sql = cast(SqlStore, store)
    rows = await sql._rows(
        f"SELECT {listing('steps')} FROM steps WHERE session_id = ? ORDER BY created_at, step_no",
        (session_id,),
    )
    records: list[StepRecord] = [sql.codec.record("steps", row) for row in rows]
    return records


async def count_running(store: Store, owner: str) -> int:
    """Sessions of `owner` running a turn or about to, as fair use counts them (sql/usage.py):
    status running, except those parked on timers or downstream tasks (phase 'waiting')."""
    sql = cast(SqlStore, store)
    return await sql._count(RUNNING_OF_OWNER, (owner,))


async def get_delivery(store: Store, delivery_id: str) -> DeliveryRecord | None:
    """The webhook delivery with this id, whatever its status."""
    return next((d for d in await store.list_deliveries(None, 10_000) if d.id == delivery_id), None)


async def enqueue(
    steps: SessionSteps,
    session_id: SessionId,
    owner: str,
    message: QueuedMessageRecord,
    max_turns: int,
    now: float,
    audit: AuditRecord | None = None,
    claim: Claim | None = None,
) -> EnqueueOutcome:
    """SessionSteps.enqueue_message with a fixed turn limit: its outcome alone."""
    outcome, _ = await steps.enqueue_message(
        session_id, owner, message, lambda _: max_turns, now, audit, claim
    )
    return outcome
