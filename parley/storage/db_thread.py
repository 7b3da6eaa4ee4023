"""One thread that owns a blocking database connection and runs functions on it, one at a time,
in the order they arrive.

Why not anyio.to_thread: a turn makes a few dozen small transactions, and each hand-off through
anyio's worker pool enters a cancel scope, takes and gives back a capacity limiter and looks up
the async backend several times; on two cores that bookkeeping cost more than SQLite's own work.
Here a hand-off is one queue put and one wake-up of the event loop.

Cancellation: a caller cancelled while its function still waits in the queue takes it out (it
never runs); a function that has started runs to its end, and its caller waits for that end
before the cancellation goes on, so no transaction outlives the call that made it.
Where it is used: docs/design.md#sqlite.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _Job(Generic[T]):
    __slots__ = ("_lock", "_state", "fn", "future", "loop")

    def __init__(self, fn: Callable[[], T], loop: asyncio.AbstractEventLoop | None) -> None:
        self.fn = fn
        self.loop = loop
        self.future: asyncio.Future[T] | None = loop.create_future() if loop is not None else None
        self._lock = threading.Lock()
        self._state = "queued"  # then "started" (by the thread) or "withdrawn" (by the caller)

    def start(self) -> bool:
        with self._lock:
            if self._state == "withdrawn":
                return False
            self._state = "started"
            return True

    def withdraw(self) -> bool:
        """Take the job out before it starts; False when it has started already."""
        with self._lock:
            if self._state == "started":
                return False
            self._state = "withdrawn"
            return True

    def settle(self, ok: bool, value: Any) -> None:
        if self.future is None or self.future.done():
            return
        if ok:
            self.future.set_result(value)
        else:
            self.future.set_exception(value)


class DatabaseThread:
    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[[], T]) -> T:
        job = _Job(fn, asyncio.get_running_loop())
        future = job.future
        assert future is not None
        self._jobs.put(job)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not job.withdraw():
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([future])
                future.exception()  # seen: the cancellation is what the caller gets
            raise

    def post(self, fn: Callable[[], object]) -> None:
        """Run `fn` on the thread when its turn comes, for nobody: a failure is logged."""
        self._jobs.put(_Job(fn, None))

    async def close(self) -> None:
        """Stop the thread once the functions queued before have run."""
        self._jobs.put(None)
        await anyio.to_thread.run_sync(self._thread.join)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if not job.start():
                continue
            try:
                outcome = (True, job.fn())
            except BaseException as exc:  # handed to the caller, whatever it is
                outcome = (False, exc)
            if job.loop is None:
                if not outcome[0]:
                    logger.error("a database job failed", exc_info=outcome[1])
                continue
            # RuntimeError: the caller's event loop is closed, nobody waits for this result.
            with contextlib.suppress(RuntimeError):
                job.loop.call_soon_threadsafe(job.settle, *outcome)
