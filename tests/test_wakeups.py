"""Wake-ups: the in-process signals a waiter or a driver holds (a change while it looks is never
lost), what a committed change announces (storage/wakeups.py), and PostgreSQL's LISTEN/NOTIFY feed
between replicas: heard by the others, not by the writer, through a dropped connection, and not
at all with storage.listen off. Fast layer: the PostgreSQL part runs in-process on the server
PARLEY_TEST_POSTGRES names (skipped without one, except on CI)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Unpack

import anyio
import psycopg
import pytest
from psycopg import sql

from parley.core.changes import Changes, SessionPatch
from parley.core.ids import SessionId, TurnId, new_session_id, new_turn_id
from parley.core.records import QueuedMessageRecord, SessionRecord
from parley.core.transitions import starting
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.storage.ports import Store
from parley.storage.postgres import PostgresStore, open_postgres_store
from parley.storage.postgres_feed import channel_name
from parley.storage.wakeups import NoChangeFeed, Wake, parse_payload, wake_after, wake_payload
from tests.postgres_support import DatabaseProxy, PgSchema
from tests.store_support import enqueue, try_acquire_lease
from tests.support import TEST_DEADLINE_S, eventually

pytestmark = pytest.mark.anyio

T0 = 1_000_000.0
SID = SessionId("ses_" + "0" * 32)


# ---------------------------------------------------------------------------- in-process signals


async def test_a_change_committed_while_a_waiter_looks_wakes_its_next_wait_at_once() -> None:
    signals = SessionSignals(poll_interval_s=TEST_DEADLINE_S)
    with signals.watching(SID) as changes:
        signals.notify(SID)  # committed while the waiter was reading the session
        with anyio.fail_after(TEST_DEADLINE_S / 2):
            assert await changes.wait(TEST_DEADLINE_S) is True
        # Seen: the next wait waits again (here, for its timeout).
        assert await changes.wait(0.01) is False


async def test_a_cancel_reaches_the_driver_that_watches_its_session_and_no_other() -> None:
    signals = SessionSignals()
    other = SessionId("ses_" + "1" * 32)
    with signals.watching_cancel(SID) as mine, signals.watching_cancel(other) as theirs:
        signals.request_cancel(SID)
        assert await mine.wait(0) is True
        assert await theirs.wait(0) is False
    signals.request_cancel(SID)  # nobody drives it here: nothing is kept for it


async def test_the_feed_going_live_lengthens_the_safety_poll_and_wakes_everything_once() -> None:
    signals = SessionSignals(poll_interval_s=0.5, notified_poll_interval_s=5.0)
    assert (signals.poll_interval_s, signals.live) == (0.5, False)
    with signals.watching(SID) as changes, signals.watching_cancel(SID) as cancels:
        signals.feed_live(True)  # after a gap in which other processes' changes were not heard
        assert signals.poll_interval_s == 5.0
        assert await changes.wait(0) and await cancels.wait(0)
        _, scan = await signals.wait_for_work(0)
        assert scan is True
        signals.feed_live(True)  # still live: nothing new to look at
        assert not await changes.wait(0)
    signals.feed_live(False)
    assert signals.poll_interval_s == 0.5


async def test_without_a_change_feed_the_signals_stay_on_the_plain_poll() -> None:
    signals = SessionSignals(poll_interval_s=0.2, notified_poll_interval_s=5.0)
    async with anyio.create_task_group() as tg:
        await tg.start(NoChangeFeed().run, signals)
    assert (signals.live, signals.poll_interval_s) == (False, 0.2)


async def test_named_work_arriving_all_the_time_does_not_put_off_the_scan() -> None:
    # Other replicas' messages name sessions constantly; timers and dead replicas' leases are
    # found only by the scan, which must still come every poll interval.
    signals = SessionSignals()
    interval = 0.2
    assert (await signals.wait_for_work(interval))[1] is True
    started = anyio.current_time()
    with anyio.fail_after(TEST_DEADLINE_S):
        while True:
            signals.work_available(SID)
            named, scan = await signals.wait_for_work(interval)
            assert named == {SID}
            if scan:
                break
            await anyio.sleep(interval / 10)
    assert interval <= anyio.current_time() - started < 3 * interval


# ---------------------------------------------------------------------------- what a change announces


def _session(**fields: object) -> SessionRecord:
    return replace(SessionRecord.new(SID, agent="demo", owner="local", kind="chat", now=T0), **fields)  # type: ignore[arg-type]


def _changes(**session: Unpack[SessionPatch]) -> Changes:
    return Changes(session=session)


@pytest.mark.parametrize(
    ("before", "changes", "work", "cancel"),
    [
        # A message to an idle session: it needs a driver.
        (_session(status="idle"), _changes(status="running", phase="queued"), True, False),
        # A step of the holder: its own lease is live, nobody else should claim it.
        (
            _session(status="running", lease_owner="p#1", lease_expires_at=T0 + 10),
            _changes(phase="model"),
            False,
            False,
        ),
        # A cancel of a turn driven elsewhere: the driver should look, nobody should claim.
        (
            _session(status="running", current_turn_id="t", lease_owner="p#1", lease_expires_at=T0 + 10),
            _changes(cancel_requested_turn=TurnId("t"), wake_at=None),
            False,
            True,
        ),
        # A cancel of a parked turn (no lease): it needs a driver to cancel it.
        (
            _session(status="waiting_for_input", current_turn_id="t"),
            _changes(cancel_requested_turn=TurnId("t"), wake_at=None, status="running"),
            True,
            True,
        ),
        # A durable timer hours away: nothing to do until the scan finds it due.
        (
            _session(status="running", phase="model"),
            _changes(phase="waiting", wake_at=T0 + 3600),
            False,
            False,
        ),
        # A running session whose holder died: claimable.
        (
            _session(status="running", lease_owner="p#1", lease_expires_at=T0 - 1),
            _changes(phase="tools"),
            True,
            False,
        ),
        # Resting: nothing to drive.
        (_session(status="running", phase="model"), _changes(status="idle", phase=None), False, False),
    ],
)
def test_a_change_announces_work_only_when_no_live_lease_holds_a_running_session(
    before: SessionRecord, changes: Changes, work: bool, cancel: bool
) -> None:
    assert wake_after(before, changes, T0) == Wake(SID, work=work, cancel=cancel)


def test_payloads_are_small_and_read_back() -> None:
    wake = Wake(SID, work=True, cancel=True)
    payload = wake_payload(wake, "proc_a")
    assert payload == f"wc/proc_a/{SID}" and len(payload) < 100
    assert parse_payload(payload) == (wake, "proc_a")
    assert parse_payload(wake_payload(Wake(SID), "")) == (Wake(SID), "")
    assert parse_payload("something else") is None
    assert len(channel_name("s" * 63)) <= 63 and channel_name("s" * 63) != channel_name("s" * 62 + "t")


# ---------------------------------------------------------------------------- PostgreSQL LISTEN/NOTIFY


@dataclass
class Heard:
    """A sink that records what the feed delivered."""

    notified: list[SessionId] = field(default_factory=list)
    cancels: list[SessionId] = field(default_factory=list)
    work: list[SessionId | None] = field(default_factory=list)
    live: list[bool] = field(default_factory=list)
    everything: int = 0

    def notify(self, session_id: SessionId) -> None:
        self.notified.append(session_id)

    def request_cancel(self, session_id: SessionId) -> None:
        self.cancels.append(session_id)

    def work_available(self, session_id: SessionId | None = None) -> None:
        self.work.append(session_id)

    def everything_changed(self) -> None:
        self.everything += 1

    def feed_live(self, live: bool) -> None:
        self.live.append(live)


async def _first_message(store: Store, text: str = "hello") -> SessionId:
    sid = new_session_id()
    first = QueuedMessageRecord.new(sid, text, now=T0)
    record = SessionRecord.new(sid, agent="demo", owner="local", kind="chat", now=T0)
    assert await store.create_session(starting(record, first), first, T0)
    return sid


def _message(sid: SessionId, text: str) -> QueuedMessageRecord:
    return QueuedMessageRecord.new(sid, text, now=T0)


@pytest.fixture
async def replicas(pg_schema: PgSchema) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one schema, as two replicas open it (processes proc_a and proc_b)."""
    pg_schema.reset()
    async with (
        open_postgres_store(
            pg_schema.url, schema=pg_schema.schema, pool_size=2, origin="proc_a", listen_ping_s=0.2
        ) as a,
        open_postgres_store(
            pg_schema.url, schema=pg_schema.schema, pool_size=2, origin="proc_b", listen_ping_s=0.2
        ) as b,
    ):
        yield a, b


async def test_a_replica_hears_what_another_commits_and_not_its_own_writes(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    heard_by_a, heard_by_b = Heard(), Heard()
    async with anyio.create_task_group() as tg:
        await tg.start(a.feed.run, heard_by_a)
        await tg.start(b.feed.run, heard_by_b)
        assert heard_by_a.live == [True] and heard_by_b.live == [True]

        sid = await hear_each_other(a, b, heard_by_a, heard_by_b)
        tg.cancel_scope.cancel()
    assert heard_by_a.notified == [sid], "a heard only b's cancel, never its own writes"


async def test_the_feed_listens_again_after_its_connection_drops_and_says_so(pg_schema: PgSchema) -> None:
    pg_schema.reset()
    heard = Heard()
    async with (
        DatabaseProxy(pg_schema.url) as proxy,
        open_postgres_store(pg_schema.url, schema=pg_schema.schema, pool_size=2, origin="writer") as writer,
        open_postgres_store(
            proxy.url,
            schema=pg_schema.schema,
            pool_size=1,
            origin="listener",
            listen_ping_s=0.2,
            connect_retry_s=1,
        ) as listener,
        anyio.create_task_group() as tg,
    ):
        await tg.start(listener.feed.run, heard)
        await proxy.cut()
        await eventually(lambda: _true(heard.live[-1] is False), "the feed to notice the dropped connection")
        missed = await _first_message(writer)  # committed while nobody listened: not heard...
        await proxy.restore()
        await eventually(lambda: _true(heard.live[-1] is True), "the feed to listen again")
        # ...which is why going live again tells the runtime to look at everything (feed_live(True)).
        assert missed not in heard.work
        after = await _first_message(writer)
        await eventually(lambda: _true(after in heard.work), "the feed to hear a change after the gap")
        tg.cancel_scope.cancel()
    assert heard.live[0] is True and False in heard.live


async def test_with_listen_off_nothing_is_announced(pg_schema: PgSchema) -> None:
    pg_schema.reset()
    with psycopg.connect(pg_schema.url, autocommit=True) as spy:
        spy.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_name(pg_schema.schema))))
        async with open_postgres_store(
            pg_schema.url, schema=pg_schema.schema, pool_size=1, listen=False
        ) as quiet:
            assert isinstance(quiet.feed, NoChangeFeed)
            await _first_message(quiet)
        async with open_postgres_store(pg_schema.url, schema=pg_schema.schema, pool_size=1) as loud:
            sid = await _first_message(loud)
        heard = [n.payload for n in spy.notifies(timeout=TEST_DEADLINE_S / 10, stop_after=2)]
    assert heard == [f"w//{sid}"]


async def hear_each_other(a: Store, b: Store, heard_by_a: Heard, heard_by_b: Heard) -> SessionId:
    """The exchange both change feeds must carry between two processes (a and b, each feed
    running): a new session, a turn's start under a live lease, a cancel asked for by the other
    process, and a session let go with work left. Returns the session's id."""
    sid = await _first_message(a)  # a new session with a message: somebody should drive it
    await eventually(lambda: _true(sid in heard_by_b.work), "b to hear of a's new session")
    assert heard_by_b.notified == [sid]

    steps = SessionSteps(a)
    lease = await try_acquire_lease(a, sid, "proc_a", T0, 30)
    assert lease is not None
    turn = await steps.start_turn(sid, lease, new_turn_id(), T0)
    assert turn is not None
    await eventually(lambda: _true(heard_by_b.notified.count(sid) == 2), "b to hear of the turn's start")
    assert heard_by_b.work == [sid], "a step under a live lease asks nobody to drive it"

    # b asks for a cancel of the turn a drives: a's driver is told, nobody else claims it.
    assert await SessionSteps(b).request_cancel(sid, "local", T0, new_turn_id()) == turn.id
    await eventually(lambda: _true(heard_by_a.cancels == [sid]), "a to hear of the cancel")
    assert heard_by_a.work == []

    # a lets the session go with work left (a message came meanwhile): b may take it over.
    assert await enqueue(steps, sid, "local", _message(sid, "more"), 100, T0) == "queued"
    await a.release_lease(sid, lease)
    await eventually(lambda: _true(heard_by_b.work == [sid, sid]), "b to hear the session was let go")
    return sid


async def _true(value: bool) -> bool:
    return value
