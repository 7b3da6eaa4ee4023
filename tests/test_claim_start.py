"""The turn a claim of a session's lease starts in its own transaction (runtime/claim_start.py),
on the real SQLite store: started when a message waits and the agent's definition is at hand;
left to the driver, with the lease still taken and the queue untouched, otherwise."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from parley.config import AgentConfig, ModelSpec
from parley.core.ids import SessionId, new_session_id, new_turn_id
from parley.core.records import QueuedMessageRecord, SessionRecord
from parley.core.transitions import starting
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.claim_start import STEP_VIEW, StartedTurn, StartOnClaim
from parley.storage.ports import Store
from tests.support import open_test_store

pytestmark = pytest.mark.anyio

AGENT = AgentConfig(name="helper", instructions="Help.", model=ModelSpec(provider="scripted", name="s"))
T0 = 1_000.0
TTL = 30.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_test_store(tmp_path / "parley.db") as opened:
        yield opened


async def waiting_session(store: Store, *, pin: str | None = None) -> SessionId:
    """A session whose first message waits for its turn."""
    record = replace(
        SessionRecord.new(new_session_id(), agent=AGENT.name, owner="alice", kind="chat", now=T0),
        agent_version_pin=pin,
    )
    message = QueuedMessageRecord.new(record.id, "hello", now=T0)
    await store.create_session(starting(record, message), message, T0)
    return record.id


async def claim(store: Store, sid: SessionId, *, stopping: bool = False) -> StartedTurn | None:
    catalog = AgentCatalog({AGENT.name: AGENT}, store)
    start = StartOnClaim(catalog, new_turn_id(), T0 + 1, None, lambda: stopping)
    claimed = await store.claim_and_decide(sid, "proc_a", T0 + 1, TTL, STEP_VIEW, start.decide, start.after)
    assert claimed is not None, "the lease is taken in every case"
    assert claimed.snapshot is not None and claimed.snapshot.session.lease_owner == claimed.lease
    return claimed.value


async def test_the_claim_starts_the_waiting_turn_on_the_live_definition(store: Store) -> None:
    sid = await waiting_session(store)
    started = await claim(store, sid)
    assert started is not None and started.fresh and started.stored
    assert started.version is not None and started.turn.agent_version == started.version.version
    snapshot = await store.snapshot(sid, STEP_VIEW)
    assert snapshot is not None and snapshot.session.current_turn_id == started.turn.id
    assert snapshot.queued == ()


@pytest.mark.parametrize("case", ["pinned to a version not live", "process stopping"])
async def test_the_claim_leaves_the_start_to_the_driver(store: Store, case: str) -> None:
    pinned = case.startswith("pinned")
    sid = await waiting_session(store, pin="0" * 64 if pinned else None)
    started = await claim(store, sid, stopping=not pinned)
    assert started is None
    snapshot = await store.snapshot(sid, STEP_VIEW)
    assert snapshot is not None and snapshot.session.current_turn_id is None
    assert [q.text for q in snapshot.queued] == ["hello"]
