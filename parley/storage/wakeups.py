"""Wake-ups across processes: the port through which a backend tells this process what other
processes committed, so the process that must act (and the callers waiting on a session) need not
wait for the next poll.

A backend publishes a `Wake` with the transaction that makes the change (PostgreSQL: a NOTIFY
delivered at COMMIT; SQLite: a line written to the other processes' FIFOs once committed,
sqlite_wakeups.py), and its `ChangeFeed` delivers other processes' wakes to a `WakeSink` (the
runtime's SessionSignals). `NoChangeFeed` is for a store that hears nothing (PostgreSQL with
`storage.listen` off): other processes' changes are found by polling alone. Polling stays the
safety net either way: a feed says when it is live, and while it is not, nothing may be assumed
delivered.

What a wake says is read off the committed session row, not decided: `work` is the work scan's
own condition (a running session no live lease holds), `cancel` is a cancel request written.
See docs/design.md#wake-ups-between-processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from parley.core.changes import Changes
from parley.core.ids import SessionId
from parley.core.records import SessionRecord


@dataclass(frozen=True, slots=True)
class Wake:
    """A session changed. `work`: it needs a driver and no live lease holds it (a replica should
    claim it). `cancel`: a cancel was requested (its driver should look now)."""

    session_id: SessionId
    work: bool = False
    cancel: bool = False


def wake_after(before: SessionRecord, changes: Changes, now: float) -> Wake:
    """The wake a decision's `changes` to the session `before` call for, once committed."""
    after = changes.session
    status = after.get("status", before.status)
    wake_at = after.get("wake_at", before.wake_at)
    owner = after.get("lease_owner", before.lease_owner)
    expires = after.get("lease_expires_at", before.lease_expires_at)
    leased = owner is not None and expires is not None and expires >= now
    due = wake_at is None or wake_at <= now
    return Wake(
        session_id=before.id,
        work=status == "running" and due and not leased,
        cancel=after.get("cancel_requested_turn") is not None,
    )


def wake_payload(wake: Wake, origin: str) -> str:
    flags = ("w" if wake.work else "") + ("c" if wake.cancel else "")
    return f"{flags or '-'}/{origin}/{wake.session_id}"


def parse_payload(payload: str) -> tuple[Wake, str] | None:
    """(the wake, its origin), or None for a payload parley did not write."""
    flags, sep, rest = payload.partition("/")
    origin, sep2, session_id = rest.partition("/")
    if not (sep and sep2 and session_id) or not set(flags) <= {"w", "c", "-"}:
        return None
    return Wake(SessionId(session_id), work="w" in flags, cancel="c" in flags), origin


class WakeSink(Protocol):
    """Where a feed delivers wakes (the runtime's SessionSignals)."""

    def notify(self, session_id: SessionId) -> None:
        """The session changed: whoever waits on it should look."""
        ...

    def request_cancel(self, session_id: SessionId) -> None:
        """A cancel was requested: the session's driver, if it is here, should look."""
        ...

    def work_available(self, session_id: SessionId | None = None) -> None:
        """A session (None: any) may need a driver: the scheduler should try to claim it."""
        ...

    def everything_changed(self) -> None:
        """Wakes may have been missed: whoever waits should look, and the scheduler scan."""
        ...

    def feed_live(self, live: bool) -> None:
        """Whether wakes are delivered from now on. Going live follows a time when wakes may have
        been missed, so the sink should look at everything once."""
        ...


class ChangeFeed(Protocol):
    """Other processes' wakes, delivered to a sink for as long as `run` runs."""

    async def run(self, sink: WakeSink, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Deliver wakes to `sink` until cancelled; `task_status.started()` once the first attempt
        to listen was made (whether it worked or not: polling covers the rest)."""
        ...


class NoChangeFeed:
    """No cross-process wake-ups: polling finds other processes' changes, so there is nothing to
    run."""

    async def run(self, sink: WakeSink, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        sink.feed_live(False)
        task_status.started()
