"""Following a session's events live: what the store kept after a position, then each event as it
is committed, with no gap and no repeat (the position is the event's sequence number, and a
session's events are committed in sequence order). Wake-ups come from the signals (this process's
commits, and other processes' through the storage's change feed or the `EventWatch` poll), so an
idle follower costs no query until something happens or its heartbeat is due."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus

from parley.core.ids import SessionId, ToolCallId, TurnId
from parley.core.records import EventRecord, InterruptRecord, ToolCallRecord
from parley.errors import StorageError
from parley.runtime.signals import SessionSignals
from parley.storage.ports import Store

logger = logging.getLogger(__name__)

# Events read from the store at a time (a replay of a long history goes page by page).
EVENT_PAGE = 200
# Kinds whose views name a tool call or an interrupt (read once per page, not per event).
CALL_KINDS = frozenset({"model_step", "tool_started", "tool_finished", "tool_remote", "timer_set"})
INTERRUPT_KINDS = frozenset({"interrupt_raised", "interrupt_resolved"})
# How far back a turn's first event is looked for at first (doubling until found).
TURN_SEARCH_WINDOW = 64
# Owners' newest sessions the watch looks at for sessions another process created.
OWNER_NEWEST = 20


@dataclass(frozen=True, slots=True)
class EventPage:
    """Events in sequence order, with the tool calls and interrupts they name (as stored now)."""

    events: list[EventRecord]
    calls: dict[ToolCallId, ToolCallRecord] = field(default_factory=dict)
    interrupts: dict[str, InterruptRecord] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reset:
    """Events after the position asked for are no longer kept (retention removed them), or the
    position is one the session never reached: the follower goes on after `latest_seq`, and the
    viewer should start over from the session's current state."""

    latest_seq: int
    oldest_kept_seq: int | None


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing was committed for a heartbeat interval."""


FollowItem = EventPage | Reset | Idle


class EventWatch:
    """Other processes' commits to followed sessions, found by one query per interval for all of
    them (each session row keeps its latest event number) and turned into wake-ups: the safety net
    behind the storage's change feed (PostgreSQL's LISTEN/NOTIFY, SQLite's wake folder), which
    wakes followers at once, and instead of a poll per stream."""

    def __init__(self, store: Store, signals: SessionSignals, interval_s: float) -> None:
        self._store = store
        self._signals = signals
        self._interval_s = interval_s
        self._followers: dict[SessionId, int] = {}
        self._owners: dict[str, int] = {}
        self._seen: dict[SessionId, int] = {}

    @contextmanager
    def following(self, session_id: SessionId) -> Iterator[None]:
        self._followers[session_id] = self._followers.get(session_id, 0) + 1
        try:
            yield
        finally:
            left = self._followers[session_id] - 1
            if left:
                self._followers[session_id] = left
            else:
                del self._followers[session_id]
                self._seen.pop(session_id, None)

    @contextmanager
    def following_owner(self, owner: str) -> Iterator[None]:
        """Sessions `owner` creates elsewhere are signalled too (an owner-wide view follows them)."""
        self._owners[owner] = self._owners.get(owner, 0) + 1
        try:
            yield
        finally:
            left = self._owners[owner] - 1
            if left:
                self._owners[owner] = left
            else:
                del self._owners[owner]

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await anyio.sleep(self._interval_s)
            try:
                await self._look()
            except StorageError as exc:
                # The database's condition is reported by /healthz; followers wait for the next look.
                logger.debug("event watch: %s", exc)

    async def _look(self) -> None:
        for owner in list(self._owners):
            page = await self._store.list_sessions(owner, None, None, None, OWNER_NEWEST)
            for session in page.sessions:
                if session.id not in self._followers and session.id not in self._seen:
                    self._seen[session.id] = -1
                    self._signals.notify(session.id)
        if not self._followers:
            return
        seqs = await self._store.event_seqs(list(self._followers))
        for session_id, seq in seqs.items():
            before = self._seen.get(session_id)
            self._seen[session_id] = seq
            if before is not None and seq > before:
                self._signals.notify(session_id)


class SessionEvents:
    """The read side of live views: follow a session's events, find where a turn's began."""

    def __init__(self, store: Store, signals: SessionSignals, watch: EventWatch) -> None:
        self._store = store
        self._signals = signals
        self._watch = watch

    @property
    def signals(self) -> SessionSignals:
        return self._signals

    @property
    def watch(self) -> EventWatch:
        return self._watch

    async def latest_seq(self, session_id: SessionId) -> int:
        return await self._store.latest_event_seq(session_id)

    async def follow(
        self, session_id: SessionId, after_seq: int, heartbeat_s: float
    ) -> AsyncGenerator[FollowItem, None]:
        """Pages of the events after `after_seq`: those stored, then each as it is committed; an
        `Idle` after `heartbeat_s` without one; a `Reset` (then events after its `latest_seq`)
        when the events right after `after_seq` are gone. Runs until the caller stops iterating."""
        with self._watch.following(session_id), self._signals.watching(session_id) as changes:
            after = after_seq
            latest = await self._store.latest_event_seq(session_id)
            if after > latest or (after < latest and not await self._store.list_events(session_id, after, 1)):
                # Past the end, or every event after the position removed (retention): the events
                # up to `latest` were committed before it was read, so none is on its way.
                yield Reset(latest_seq=latest, oldest_kept_seq=await self._oldest(session_id))
                after = latest
            while True:
                events = await self._store.list_events(session_id, after, EVENT_PAGE)
                if events and events[0].seq != after + 1:
                    latest = await self._store.latest_event_seq(session_id)
                    yield Reset(latest_seq=latest, oldest_kept_seq=events[0].seq)
                    after = latest
                    continue
                if events:
                    yield await self.page(session_id, events)
                    after = events[-1].seq
                    continue
                if not await changes.wait(heartbeat_s):
                    yield Idle()

    async def _oldest(self, session_id: SessionId) -> int | None:
        first = await self._store.list_events(session_id, 0, 1)
        return first[0].seq if first else None

    async def page(self, session_id: SessionId, events: list[EventRecord]) -> EventPage:
        """`events` with the tool calls and interrupts they name, read once for the page."""
        named = CALL_KINDS | INTERRUPT_KINDS
        turns = {e.turn_id for e in events if e.kind in named and e.turn_id is not None}
        calls: dict[ToolCallId, ToolCallRecord] = {}
        for turn_id in turns:
            calls.update({c.id: c for c in await self._store.list_tool_calls(turn_id)})
        interrupts: dict[str, InterruptRecord] = {}
        if any(e.kind in INTERRUPT_KINDS for e in events):
            found = await self._store.list_interrupts(session_id, pending_only=False)
            interrupts = {i.id: i for i in found}
        return EventPage(events, calls, interrupts)

    async def turn_start(self, session_id: SessionId, turn_id: TurnId) -> int | None:
        """The position just before the turn's `turn_started` event (None: not found). Looked for
        from the newest events back, in growing windows: the turn asked for is nearly always the
        latest."""
        latest = await self._store.latest_event_seq(session_id)
        window = TURN_SEARCH_WINDOW
        end = latest
        while end > 0:
            start = max(0, end - window)
            events = await self._store.list_events(session_id, start, end - start)
            for event in events:
                if event.kind == "turn_started" and event.turn_id == turn_id:
                    return event.seq - 1
            end, window = start, window * 2
        return None

    async def read(self, session_id: SessionId, after_seq: int, limit: int) -> list[EventRecord]:
        """The stored events after `after_seq` (at most `limit`), without waiting."""
        return await self._store.list_events(session_id, after_seq, limit)

    async def latest_seqs(self, session_ids: Sequence[SessionId]) -> dict[SessionId, int]:
        return await self._store.event_seqs(session_ids)
