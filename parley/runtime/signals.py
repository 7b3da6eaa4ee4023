"""In-process wake-ups: a fast path beside the database polling that other processes rely on."""

from __future__ import annotations

import anyio

from parley.ids import SessionId


class SessionSignals:
    """Per-session events: 'something was committed' and 'a cancel was requested here'."""

    def __init__(self) -> None:
        self._changed: dict[SessionId, anyio.Event] = {}
        self._waiting: dict[SessionId, int] = {}
        self._cancel: dict[SessionId, anyio.Event] = {}
        self._work = anyio.Event()
        self._named: set[SessionId] = set()
        self._scan_wanted = False

    def notify(self, session_id: SessionId) -> None:
        event = self._changed.pop(session_id, None)
        if event is not None:
            event.set()

    async def wait_changed(self, session_id: SessionId, timeout_s: float) -> None:
        """Return when the session changes in this process, or after `timeout_s` at most."""
        event = self._changed.setdefault(session_id, anyio.Event())
        self._waiting[session_id] = self._waiting.get(session_id, 0) + 1
        try:
            with anyio.move_on_after(timeout_s):
                await event.wait()
        finally:
            left = self._waiting[session_id] - 1
            if left:
                self._waiting[session_id] = left
            else:
                # Nobody waits on this session any more: forget its event (sessions come and go).
                del self._waiting[session_id]
                if self._changed.get(session_id) is event:
                    del self._changed[session_id]

    def request_cancel(self, session_id: SessionId) -> None:
        event = self._cancel.pop(session_id, None)
        if event is not None:
            event.set()

    async def cancel_requested(self, session_id: SessionId) -> None:
        await self._cancel.setdefault(session_id, anyio.Event()).wait()

    def work_available(self, session_id: SessionId | None = None) -> None:
        """Something needs a driver: `session_id` when the caller knows which session (the
        scheduler then tries that one without scanning for work), None to have it scan."""
        if session_id is None:
            self._scan_wanted = True
        else:
            self._named.add(session_id)
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
