# ruff: noqa: F811
"""The contract of the ports that keep sessions manageable, on every backend: titles and tags,
list_sessions narrowed by title text, tag and creation time (with paging), and the retention
sweeps (sessions by status and age, events by age). The backends and fixtures are the storage
contract's (tests/test_storage_contract.py)."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from parley.core.ids import SessionId
from parley.core.records import SessionFilter, SweepRule
from parley.runtime.session_steps import SessionSteps
from parley.storage.ports import Store
from tests.test_storage_contract import LEASE_A, T0, _finish, new_session, running_turn, session_record

# The contract's backends, as its fixtures (see tests/test_storage_access_contract.py).
from tests.test_storage_contract import backend, other_store, store  # noqa: F401  # isort: skip

pytestmark = pytest.mark.anyio


async def _ids(store: Store, match: SessionFilter, owner: str = "alice", limit: int = 50) -> list[SessionId]:
    found: list[SessionId] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(owner, None, None, cursor, limit, match)
        found.extend(s.id for s in page.sessions)
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


async def test_titles_and_tags_are_stored_read_back_and_replaced_whole(
    store: Store, other_store: Store
) -> None:
    record = session_record()
    await store.create_session(replace(record, title="Trip to Lyon"), None, T0)
    sid = record.id
    stored = await other_store.get_session(sid)
    assert stored is not None and (stored.title, stored.tags) == ("Trip to Lyon", [])
    assert await store.set_labels(sid, "Trip to Paris", ["travel", "2026"])
    stored = await other_store.get_session(sid)
    assert stored is not None and (stored.title, stored.tags) == ("Trip to Paris", ["travel", "2026"])
    assert await store.set_labels(sid, None, [])
    stored = await other_store.get_session(sid)
    assert stored is not None and (stored.title, stored.tags) == (None, [])
    assert not await store.set_labels(SessionId("ses_" + "0" * 32), "x", [])


async def test_a_proposed_title_is_taken_only_by_a_session_without_one(store: Store) -> None:
    sid = await new_session(store)
    assert await store.propose_title(sid, "first words")
    assert not await store.propose_title(sid, "other words")
    await store.set_labels(sid, "mine", ["a"])
    assert not await store.propose_title(sid, "again")
    stored = await store.get_session(sid)
    assert stored is not None and (stored.title, stored.tags) == ("mine", ["a"])


async def test_a_turns_steps_never_overwrite_the_labels(store: Store) -> None:
    sid, turn = await running_turn(store)
    await store.set_labels(sid, "kept", ["kept"])
    await _finish(store, sid, LEASE_A, turn.id, "answered", "hi", None, T0 + 2)
    stored = await store.get_session(sid)
    assert stored is not None and (stored.status, stored.title, stored.tags) == ("idle", "kept", ["kept"])


async def test_list_sessions_filters_by_title_text_tag_and_creation_time_with_paging(store: Store) -> None:
    made: dict[str, SessionId] = {}
    for i, (title, tags) in enumerate(
        [
            ("Budget 2026 review", ["work", "finance"]),
            ("Holiday plans", ["home"]),
            ("budget for the HOLIDAY", ["home", "finance"]),
            (None, ["work"]),
            ("100% sure_thing", []),
        ]
    ):
        sid = await new_session(store, now=T0 + i)
        await store.set_labels(sid, title, tags)
        made[title or "untitled"] = sid
    bobs = await new_session(store, owner="bob", now=T0 + 10)
    await store.set_labels(bobs, "Budget of bob", ["finance"])

    budget, holiday, both = made["Budget 2026 review"], made["Holiday plans"], made["budget for the HOLIDAY"]
    assert await _ids(store, SessionFilter(title="budget")) == [both, budget]
    assert await _ids(store, SessionFilter(title="holiday")) == [both, holiday]
    # The text is matched as it is: % and _ are no wildcards.
    assert await _ids(store, SessionFilter(title="0% s")) == [made["100% sure_thing"]]
    assert await _ids(store, SessionFilter(title="e_t")) == [made["100% sure_thing"]]
    assert await _ids(store, SessionFilter(title="%")) == [made["100% sure_thing"]]
    assert await _ids(store, SessionFilter(tag="finance")) == [both, budget]
    assert await _ids(store, SessionFilter(tag="work")) == [made["untitled"], budget]
    assert await _ids(store, SessionFilter(tag="fin")) == []
    assert await _ids(store, SessionFilter(tag="home", title="plans")) == [holiday]
    assert await _ids(store, SessionFilter(created_from=T0 + 1, created_before=T0 + 3)) == [both, holiday]
    assert await _ids(store, SessionFilter(created_from=T0 + 4)) == [made["100% sure_thing"]]
    # Paging through a filter: every match once, newest first.
    assert await _ids(store, SessionFilter(tag="finance"), limit=1) == [both, budget]
    assert await _ids(store, SessionFilter(), limit=2) == list(reversed(list(made.values())))
    assert await _ids(store, SessionFilter(tag="finance"), owner="bob") == [bobs]


async def test_a_sweep_deletes_ended_and_idle_sessions_past_their_age_in_batches(
    store: Store, other_store: Store
) -> None:
    steps = SessionSteps(store)
    closed = await new_session(store, now=T0)
    await steps.request_close(closed, "alice", "done", T0 + 1)
    idle_old = await new_session(store, now=T0 + 2)
    idle_new = await new_session(store, now=T0 + 50)
    running, _ = await running_turn(store)
    closed_new = await new_session(store, owner="bob", now=T0 + 50)
    await steps.request_close(closed_new, "bob", "done", T0 + 51)

    rule = SweepRule(ended_before=T0 + 10, idle_before=T0 + 5)
    first = await store.sweep_sessions(rule, T0 + 100, 1)
    second = await other_store.sweep_sessions(rule, T0 + 100, 10)
    assert [s.id for s in first] == [closed]
    assert first[0].status == "closed" and first[0].owner == "alice"
    assert [s.id for s in second] == [idle_old]
    assert await store.sweep_sessions(rule, T0 + 100, 10) == []
    for sid, status in ((closed, "closed"), (idle_old, "idle")):
        assert await store.get_session(sid) is None
        assert await store.list_events(sid, 0, 100) == []
        [entry] = await other_store.list_audit(sid, None, None, 10)
        assert (entry.principal, entry.action, entry.outcome, entry.at) == (
            "retention",
            "retention",
            "ok",
            T0 + 100,
        )
        assert entry.detail == {"owner": "alice", "agent": "demo", "status": status}
    for sid in (idle_new, running, closed_new):
        assert await store.get_session(sid) is not None
    # Idle sessions are kept when the rule names no age for them.
    assert await store.sweep_sessions(SweepRule(ended_before=T0 + 100, idle_before=None), T0 + 100, 10) != []
    assert await store.get_session(idle_new) is not None


async def test_purging_events_keeps_the_transcript_the_numbers_and_running_sessions_events(
    store: Store,
) -> None:
    sid, turn = await running_turn(store)
    await _finish(store, sid, LEASE_A, turn.id, "answered", "hi", None, T0 + 2)
    latest = await store.latest_event_seq(sid)
    messages = await store.list_messages(sid, None, None)
    busy, _ = await running_turn(store, owner="proc_b")
    busy_events = await store.list_events(busy, 0, 100)
    assert latest > 2 and busy_events

    assert await store.purge_events(T0 + 1.5, 2) == 2
    purged = 2
    while (n := await store.purge_events(T0 + 1.5, 2)) > 0:
        purged += n
    left = await store.list_events(sid, 0, 100)
    assert left and all(e.created_at >= T0 + 1.5 for e in left)
    assert await store.latest_event_seq(sid) == latest
    assert await store.list_messages(sid, None, None) == messages
    assert await store.list_events(busy, 0, 100) == busy_events
    # New events go on from the same numbers.
    await store.record_event(sid, None, "note", {}, T0 + 3)
    assert (await store.list_events(sid, latest, 10))[0].seq == latest + 1


async def test_processes_sweeping_at_once_remove_each_session_once_and_audit_it_once(
    store: Store, other_store: Store
) -> None:
    steps = SessionSteps(store)
    made = []
    for i in range(12):
        sid = await new_session(store, now=T0 + i / 100)
        await steps.request_close(sid, "alice", "done", T0 + 1)
        made.append(sid)
    rule = SweepRule(ended_before=T0 + 10, idle_before=None)
    swept: list[SessionId] = []

    async def sweep(handle: Store) -> None:
        while batch := await handle.sweep_sessions(rule, T0 + 100, 2):
            swept.extend(s.id for s in batch)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sweep, store)
        tg.start_soon(sweep, other_store)
    assert sorted(swept) == sorted(made), "every session once, none twice"
    for sid in made:
        assert [e.principal for e in await store.list_audit(sid, None, None, 10)] == ["retention"]
