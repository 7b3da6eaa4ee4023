"""Wake-ups: what this process commits, and what other processes commit as far as the storage's
change feed delivers it (PostgreSQL's LISTEN/NOTIFY, SQLite's wake folder), wake whoever waits on
it at once. Polling the database is the safety net beside them: at `poll_interval_s`, or, while
the feed is live (every change of another process arrives), at the slower
`notified_poll_interval_s`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import anyio

from parley.core.changes import SessionSnapshot
from parley.core.ids import SessionId


class Watch:
    """Wake-ups of one session since the last wait. Open it before looking at the session, so a
    change committed while the look reads is not missed: the next wait then returns at once.

    A change may hand over the session as its own transaction read it back once written (the
    driver does, at a turn's start and end, when someone here waits): the waiter then needs no
    read of its own. Only the last change's counts; any other change, or a wait that times out,
    clears it."""

    __slots__ = ("_event", "_seen")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._seen: SessionSnapshot | None = None

    def fire(self, seen: SessionSnapshot | None = None) -> None:
        self._seen = seen
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """Return when woken (True), or after `timeout_s` at most (False)."""
        with anyio.move_on_after(timeout_s):
            await self._event.wait()
        if not self._event.is_set():
            self._seen = None
            return False
        self._event = anyio.Event()
        return True

    def take_seen(self) -> SessionSnapshot | None:
        """The session as the last change that woke this watch committed it, if that change
        handed it over (once: then None)."""
        seen, self._seen = self._seen, None
        return seen


class ChangeTap:
    """Every session that changes while it is open (an owner-wide live view): the ids collect
    until the next `wait`, which returns them."""

    __slots__ = ("_changed", "_event")

    def __init__(self) -> None:
        self._changed: set[SessionId] = set()
        self._event = anyio.Event()

    def add(self, session_id: SessionId) -> None:
        self._changed.add(session_id)
        self._event.set()

    async def wait(self, timeout_s: float) -> set[SessionId]:
        """The sessions changed since the last wait; empty after `timeout_s` without a change."""
        with anyio.move_on_after(timeout_s):
            await self._event.wait()
        changed, self._changed = self._changed, set()
        self._event = anyio.Event()
        return changed


class _Watches:
    """The open watches, by session; a session without one takes no memory."""

    def __init__(self) -> None:
        self._by_session: dict[SessionId, set[Watch]] = {}

    def fire(
        self, session_id: SessionId, but: Watch | None = None, seen: SessionSnapshot | None = None
    ) -> None:
        for watch in self._by_session.get(session_id, ()):
            if watch is not but:
                watch.fire(seen)

    def watched(self, session_id: SessionId) -> bool:
        return session_id in self._by_session

    def fire_all(self) -> None:
        for watches in self._by_session.values():
            for watch in watches:
                watch.fire()

    @contextmanager
    def open(self, session_id: SessionId) -> Iterator[Watch]:
        watch = Watch()
        self._by_session.setdefault(session_id, set()).add(watch)
        try:
            yield watch
        finally:
            left = self._by_session[session_id]
            left.discard(watch)
            if not left:
                del self._by_session[session_id]


class SessionSignals:
    """Per-session wake-ups ('something was committed', 'a cancel was requested') and the
    scheduler's 'work is available'. Also the storage change feed's sink (storage/wakeups.py)."""

    def __init__(self, poll_interval_s: float = 0.5, notified_poll_interval_s: float | None = None) -> None:
        self._changed = _Watches()
        self._cancels = _Watches()
        self._taps: set[ChangeTap] = set()
        self._work = anyio.Event()
        self._named: set[SessionId] = set()
        self._scan_wanted = False
        self._scanned_at = -math.inf
        self._poll_interval_s = poll_interval_s
        self._notified_poll_interval_s = max(notified_poll_interval_s or poll_interval_s, poll_interval_s)
        self._live = False

    @property
    def poll_interval_s(self) -> float:
        """How often a wait on one session looks at the database by itself: other processes'
        changes are seen by these looks unless a live change feed delivers them."""
        return self._notified_poll_interval_s if self._live else self._poll_interval_s

    @property
    def live(self) -> bool:
        """Whether the change feed delivers other processes' changes now."""
        return self._live

    def feed_live(self, live: bool) -> None:
        if live and not self._live:
            # Whatever other processes did while nothing could be delivered: look at it all once.
            self.everything_changed()
        self._live = live

    def everything_changed(self) -> None:
        self._changed.fire_all()
        self._cancels.fire_all()
        self.work_available()

    def notify(
        self, session_id: SessionId, but: Watch | None = None, seen: SessionSnapshot | None = None
    ) -> None:
        """The session changed: wake its watches (all but `but`, held by whoever made the change
        and knows it already) and every tap. `seen`: the session as the change's own transaction
        read it back once written, handed to the watches (see Watch)."""
        self._changed.fire(session_id, but, seen)
        for tap in self._taps:
            tap.add(session_id)

    @contextmanager
    def tapping(self) -> Iterator[ChangeTap]:
        """Every session's changes while it is open (see ChangeTap)."""
        tap = ChangeTap()
        self._taps.add(tap)
        try:
            yield tap
        finally:
            self._taps.discard(tap)

    def watched(self, session_id: SessionId) -> bool:
        """Whether a watch of this process waits on the session now (worth handing it `seen`)."""
        return self._changed.watched(session_id)

    def watching(self, session_id: SessionId) -> AbstractContextManager[Watch]:
        """The session's changes while it is open (see Watch)."""
        return self._changed.open(session_id)

    def request_cancel(self, session_id: SessionId) -> None:
        self._cancels.fire(session_id)
        # The request is committed: whoever follows the session sees it at once.
        self.notify(session_id)

    def watching_cancel(self, session_id: SessionId) -> AbstractContextManager[Watch]:
        """Cancel requests of the session while it is open (the driver holds one while it drives)."""
        return self._cancels.open(session_id)

    def work_available(self, session_id: SessionId | None = None, but: Watch | None = None) -> None:
        """Something needs a driver: `session_id` when the caller knows which session (the
        scheduler then tries that one without scanning for work), None to have it scan. `but`:
        the watch of the caller that committed the work (see notify)."""
        if session_id is None:
            self._scan_wanted = True
        else:
            self._named.add(session_id)
            # Work is given once it is committed (a message, a decision): followers look now
            # rather than when the driver's next step lands.
            self.notify(session_id, but)
        self._work.set()

    async def wait_for_work(self, timeout_s: float) -> tuple[set[SessionId], bool]:
        """Wait until work is signalled, `timeout_s` at most: the sessions named since the last
        call, and whether to scan (asked for, or `timeout_s` passed since the last scan: work no
        signal names, such as a timer come due or the lease of a process that died). Named work
        arriving all the time (other replicas' messages, through the change feed) does not put
        the scan off."""
        with anyio.move_on_after(timeout_s):
            await self._work.wait()
        self._work = anyio.Event()
        named, self._named = self._named, set()
        now = anyio.current_time()
        scan = self._scan_wanted or now - self._scanned_at >= timeout_s
        self._scan_wanted = False
        if scan:
            self._scanned_at = now
        return named, scan
