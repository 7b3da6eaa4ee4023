# ruff: noqa: F811
"""The contract of the ports that serve many principals, on every backend: the queries across
owners (fair-use counts, interrupts waiting for a principal, deleting a session) and the audit
trail. The backends and fixtures are the storage contract's (tests/test_storage_contract.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from parley.config.auth import LimitsConfig
from parley.core.changes import Admit, SnapshotScope, UsageScope
from parley.core.ids import SessionId, new_task_id, new_turn_id
from parley.core.records import AuditRecord, InterruptRecord, PendingInterrupt, TaskRecord, TurnRecord
from parley.core.transitions import starting
from parley.errors import RateLimited
from parley.runtime.access import Principal
from parley.runtime.fair_use import FairUse
from parley.runtime.session_steps import SessionSteps
from parley.storage.ports import Store
from tests.test_storage_contract import (
    LEASE_A,
    PROC_A,
    T0,
    _pending_approval,
    new_session,
    queued,
    running_turn,
    session_record,
)

# The contract's backends, as its fixtures (pytest finds them by name in this module; the tests
# take them as arguments of the same names, which ruff would call redefinitions).
from tests.test_storage_contract import backend, other_store, store  # noqa: F401  # isort: skip
from tests.store_support import count_running, enqueue, list_steps, try_acquire_lease

pytestmark = pytest.mark.anyio

ALICE = Principal(id="alice", scopes=frozenset({"parley:use"}), authenticated=True)


def _entry(
    principal: str, action: str, *, session_id: SessionId | None = None, at: float = T0, **detail: str
) -> AuditRecord:
    return AuditRecord(
        id=0,
        at=at,
        principal=principal,
        client="claude-code",
        action=action,
        outcome="ok",
        session_id=session_id,
        target=None,
        detail=dict(detail),
    )


async def _parked(store: Store, owner: str = "alice") -> tuple[SessionId, TurnRecord, InterruptRecord]:
    """A session of `owner` whose turn waits for an approval, parked: no lease held."""
    sid, turn = await running_turn(store)
    interrupt = await _pending_approval(store, sid, turn, T0 + 2)
    parked, _ = await SessionSteps(store).park_turn(sid, LEASE_A, turn.id, T0 + 3)
    assert parked
    await store.release_lease(sid, LEASE_A)
    return sid, turn, interrupt


# ---------------------------------------------------------------------------- the audit trail


async def test_audit_entries_are_listed_newest_first_by_session_and_by_principal(
    store: Store, other_store: Store
) -> None:
    sid = SessionId("ses_" + "1" * 32)
    other = SessionId("ses_" + "2" * 32)
    await store.record_audit(_entry("alice", "message", session_id=sid, via="tool"))
    await other_store.record_audit(_entry("bob", "approve", session_id=sid))
    await store.record_audit(_entry("alice", "cancel", session_id=other))
    entries = await other_store.list_audit(None, None, None, 10)
    assert [(e.principal, e.action) for e in entries] == [
        ("alice", "cancel"),
        ("bob", "approve"),
        ("alice", "message"),
    ]
    assert entries[0].id > entries[1].id > entries[2].id > 0
    assert entries[2].detail == {"via": "tool"} and entries[2].client == "claude-code"
    assert [e.action for e in await store.list_audit(sid, None, None, 10)] == ["approve", "message"]
    assert [e.action for e in await store.list_audit(None, "alice", None, 10)] == ["cancel", "message"]
    assert [e.action for e in await store.list_audit(sid, "alice", None, 10)] == ["message"]
    # Paging: the entries before an id.
    assert [e.action for e in await store.list_audit(None, None, entries[0].id, 1)] == ["approve"]


async def test_a_queued_message_commits_its_audit_entry_with_it_and_a_refused_one_none(store: Store) -> None:
    sid = await new_session(store, owner="alice")
    steps = SessionSteps(store)
    message = queued(sid, "hello")
    sent = _entry("alice", "message", session_id=sid)
    assert await enqueue(steps, sid, "alice", message, 10, T0 + 1, sent) == "queued"
    [entry] = await store.list_audit(sid, None, None, 10)
    assert (entry.principal, entry.action, entry.session_id) == ("alice", "message", sid)
    # Refused (not the caller's session, or past its turns): neither the message nor an entry.
    refused = _entry("mallory", "message", session_id=sid)
    assert await enqueue(steps, sid, "mallory", queued(sid, "x"), 10, T0 + 2, refused) == "not_found"
    assert await enqueue(steps, sid, "alice", queued(sid, "y"), 0, T0 + 3, sent) == "turn_limit"
    assert [e.principal for e in await store.list_audit(sid, None, None, 10)] == ["alice"]
    assert [q.id for q in await store.list_queued(sid)] == [message.id]


async def test_a_new_session_commits_its_audit_entry_with_it_and_a_refused_start_none(store: Store) -> None:
    first = replace(session_record(owner="alice"), start_client_message_id="start-1")
    message = queued(first.id, "hello")
    started = _entry("alice", "message", session_id=first.id)
    assert await store.create_session(starting(first, message), message, T0, audit=started)
    [entry] = await store.list_audit(first.id, None, None, 10)
    assert (entry.principal, entry.action, entry.session_id) == ("alice", "message", first.id)
    # A second start with the same client_message_id writes neither the session nor an entry.
    again = replace(session_record(owner="alice"), start_client_message_id="start-1")
    refused = _entry("alice", "message", session_id=again.id)
    assert not await store.create_session(starting(again, None), None, T0 + 1, audit=refused)
    assert await store.list_audit(again.id, None, None, 10) == []
    assert [e.session_id for e in await store.list_audit(None, "alice", None, 10)] == [first.id]


async def test_purging_the_audit_deletes_only_older_entries_and_ids_never_come_back(store: Store) -> None:
    await store.record_audit(_entry("alice", "message", at=T0))
    await store.record_audit(_entry("alice", "close", at=T0 + 100))
    [_, old] = await store.list_audit(None, None, None, 10)
    assert await store.purge_audit(T0 + 50) == 1
    assert [e.action for e in await store.list_audit(None, None, None, 10)] == ["close"]
    await store.record_audit(_entry("bob", "message", at=T0 + 200))
    newest = (await store.list_audit(None, None, None, 1))[0]
    assert newest.principal == "bob" and newest.id > old.id + 1


# ---------------------------------------------------------------------------- deleting a session


async def test_deleting_a_parked_session_removes_all_of_it_and_its_tasks_but_keeps_its_audit(
    store: Store, other_store: Store
) -> None:
    sid, turn, _ = await _parked(store)
    kept = await new_session(store, "someone else's", owner="bob")
    task = TaskRecord(
        id=new_task_id(),
        owner="alice",
        generation="2025-11-25",
        tool="send_message",
        session_id=sid,
        queued_message_id=None,
        turn_id=turn.id,
        status="input_required",
        status_message=None,
        result=None,
        ttl_ms=60_000,
        poll_interval_ms=1000,
        created_at=T0,
        updated_at=T0,
        expires_at=T0 + 60,
    )
    await store.create_task(task)
    await store.record_audit(_entry("alice", "message", session_id=sid))

    assert await other_store.delete_session(sid, T0 + 5) == "deleted"
    assert await store.get_session(sid) is None
    assert await store.get_turn(turn.id) is None
    assert await store.list_messages(sid, None, None) == []
    assert await store.list_events(sid, 0, 100) == []
    assert await store.list_interrupts(sid, pending_only=False) == []
    assert await list_steps(store, sid) == []
    assert await store.get_task(task.id, T0 + 5) is None
    assert [e.action for e in await store.list_audit(sid, None, None, 10)] == ["message"]
    assert await store.get_session(kept) is not None
    assert await store.delete_session(sid, T0 + 6) == "not_found"


async def test_a_running_or_leased_session_is_not_deleted(store: Store) -> None:
    sid, _ = await running_turn(store)
    assert await store.delete_session(sid, T0 + 5) == "busy"
    assert await store.get_session(sid) is not None
    idle = await new_session(store)
    lease = await try_acquire_lease(store, idle, PROC_A, T0, 30.0)
    # An idle session needs no driver, so it has no lease to take; with one held it would be busy.
    assert lease is None
    assert await store.delete_session(idle, T0 + 5) == "deleted"


# ---------------------------------------------------------------------------- across owners


async def test_running_turns_are_counted_per_owner_without_the_parked_ones(store: Store) -> None:
    await running_turn(store)
    await new_session(store, "queued, about to run")
    await new_session(store)  # idle
    await new_session(store, "bob's", owner="bob")
    await _parked(store)
    assert await count_running(store, "alice") == 2
    assert await count_running(store, "bob") == 1
    assert await count_running(store, "carol") == 0


async def test_pending_interrupts_are_listed_by_owner_or_agent_oldest_first(store: Store) -> None:
    alice_sid, _, alice_wait = await _parked(store)
    bob_sid = await new_session(store, "x", owner="bob", agent="deployer")
    lease = await try_acquire_lease(store, bob_sid, PROC_A, T0, 30.0)
    assert lease is not None
    turn = await SessionSteps(store).start_turn(bob_sid, lease, new_turn_id(), T0 + 1)
    assert turn is not None
    bob_wait = await _pending_approval(store, bob_sid, turn, T0 + 9)

    def ids(found: list[PendingInterrupt]) -> list[tuple[str, str, str]]:
        return [(p.interrupt.id, p.agent, p.owner) for p in found]

    assert ids(await store.list_pending_for("alice", None, 10)) == [(alice_wait.id, "demo", "alice")]
    assert ids(await store.list_pending_for(None, ["deployer"], 10)) == [(bob_wait.id, "deployer", "bob")]
    assert ids(await store.list_pending_for("alice", ["deployer"], 10)) == [
        (alice_wait.id, "demo", "alice"),
        (bob_wait.id, "deployer", "bob"),
    ]
    assert len(await store.list_pending_for(None, None, 10)) == 2
    assert await store.list_pending_for(None, [], 10) == []
    assert ids(await store.list_pending_for("alice", ["deployer"], 1)) == [(alice_wait.id, "demo", "alice")]
    assert await store.list_pending_for("carol", None, 10) == []
    assert alice_sid != bob_sid


async def test_sessions_of_every_owner_are_listed_without_an_owner(store: Store) -> None:
    mine = await new_session(store)
    theirs = await new_session(store, owner="bob")
    assert {s.id for s in (await store.list_sessions(None, None, None, None, 10)).sessions} == {mine, theirs}
    assert [s.id for s in (await store.list_sessions("bob", None, None, None, 10)).sessions] == [theirs]


async def test_fair_use_is_counted_with_the_write_a_refusal_writes_nothing_and_old_counts_go(
    store: Store,
) -> None:
    fair = FairUse(LimitsConfig(sessions_per_minute=1, messages_per_minute=1))
    steps = SessionSteps(store)

    async def start(now: float) -> bool:
        record = session_record(owner="alice")
        claim = fair.claim(ALICE, new_session=True, message=False, now=now)
        assert claim is not None
        admit = Admit(claim.scope, lambda usage: claim.admit(usage, starts_turn=False))
        return await store.create_session(starting(record, None), None, now, admit)

    assert await start(T0)
    with pytest.raises(RateLimited, match=r"limits\.sessions_per_minute = 1.*Try again in 50 s"):
        await start(T0 + 10)
    assert len((await store.list_sessions("alice", None, None, None, 10)).sessions) == 1

    sid = await new_session(store, owner="alice")

    async def send(text: str, now: float) -> str:
        claim = fair.claim(ALICE, new_session=False, message=True, now=now)
        return await enqueue(steps, sid, "alice", queued(sid, text, now), 100, now, None, claim)

    assert await send("one", T0 + 1) == "queued"
    with pytest.raises(RateLimited, match=r"limits\.messages_per_minute = 1.*Try again in 30 s"):
        await send("two", T0 + 31)
    assert await send("three", T0 + 61.5) == "queued"  # the first one is out of the minute
    seen = await store.snapshot(sid, SnapshotScope(turn=False, usage=UsageScope(owner="alice", since=0)))
    assert seen is not None and [m.text for m in seen.queued] == ["one", "three"]
    # Only what a limit still counts is kept: the message of T0 + 1 and the session of T0 are gone.
    assert seen.usage is not None and dict(seen.usage.counts) == {"messages": 1}
