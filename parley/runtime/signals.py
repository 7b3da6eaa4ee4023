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

    def work_available(self) -> None:
        self._work.set()

    async def wait_for_work(self, timeout_s: float) -> None:
        with anyio.move_on_after(timeout_s):
            await self._work.wait()
        self._work = anyio.Event()
