"""In-process wake-ups: a fast path beside the database polling that other processes rely on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import anyio

from parley.ids import SessionId


class Watch:
    """Wake-ups of one session since the last wait. Open it before looking at the session, so a
    change committed while the look reads is not missed: the next wait then returns at once."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def fire(self) -> None:
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """Return when woken (True), or after `timeout_s` at most (False)."""
        with anyio.move_on_after(timeout_s):
            await self._event.wait()
        if not self._event.is_set():
            return False
        self._event = anyio.Event()
        return True


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


class SessionSignals:
    """Per-session events: 'something was committed' and 'a cancel was requested here'."""

    def __init__(self) -> None:
        self._watches: dict[SessionId, set[Watch]] = {}
        self._taps: set[ChangeTap] = set()
        self._cancel: dict[SessionId, anyio.Event] = {}
        self._work = anyio.Event()
        self._named: set[SessionId] = set()
        self._scan_wanted = False

    def notify(self, session_id: SessionId) -> None:
        for watch in self._watches.get(session_id, ()):
            watch.fire()
        for tap in self._taps:
            tap.add(session_id)

    def watching(self, session_id: SessionId) -> AbstractContextManager[Watch]:
        """The session's changes while it is open (see Watch)."""
        return self._open(session_id)

    @contextmanager
    def _open(self, session_id: SessionId) -> Iterator[Watch]:
        watch = Watch()
        self._watches.setdefault(session_id, set()).add(watch)
        try:
            yield watch
        finally:
            # Nobody watches the session any more: forget it (sessions come and go).
            left = self._watches[session_id]
            left.discard(watch)
            if not left:
                del self._watches[session_id]

    @contextmanager
    def tapping(self) -> Iterator[ChangeTap]:
        """Every session's changes while it is open (see ChangeTap)."""
        tap = ChangeTap()
        self._taps.add(tap)
        try:
            yield tap
        finally:
            self._taps.discard(tap)

    async def wait_changed(self, session_id: SessionId, timeout_s: float) -> None:
        """Return when the session changes in this process, or after `timeout_s` at most. (A change
        made before the call is not seen: a caller that looks and then waits holds a `watching`.)"""
        with self._open(session_id) as watch:
            await watch.wait(timeout_s)

    def request_cancel(self, session_id: SessionId) -> None:
        event = self._cancel.pop(session_id, None)
        if event is not None:
            event.set()
        # The request is committed: whoever follows the session sees it at once.
        self.notify(session_id)

    async def cancel_requested(self, session_id: SessionId) -> None:
        await self._cancel.setdefault(session_id, anyio.Event()).wait()

    def work_available(self, session_id: SessionId | None = None) -> None:
        """Something needs a driver: `session_id` when the caller knows which session (the
        scheduler then tries that one without scanning for work), None to have it scan."""
        if session_id is None:
            self._scan_wanted = True
        else:
            self._named.add(session_id)
            # Work is given once it is committed (a message, a decision): followers look now
            # rather than when the driver's next step lands.
            self.notify(session_id)
        self._work.set()

    async def wait_for_work(self, timeout_s: float) -> tuple[set[SessionId], bool]:
        """Wait until work is signalled, `timeout_s` at most: the sessions named since the last
        call, and whether to scan (asked for, or the time passed: other processes' work)."""
        signalled = False
        with anyio.move_on_after(timeout_s):
            await self._work.wait()
            signalled = True
        self._work = anyio.Event()
        named, self._named = self._named, set()
        scan, self._scan_wanted = self._scan_wanted or not signalled, False
        return named, scan
