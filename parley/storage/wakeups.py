"""Wake-ups across processes: the port through which a backend tells this process what other
processes committed, so the process that must act (and the callers waiting on a session) need not
wait for the next poll.

A backend that can (PostgreSQL: LISTEN/NOTIFY) publishes a `Wake` with the transaction that
makes the change, and its `ChangeFeed` delivers other processes' wakes to a `WakeSink` (the
runtime's SessionSignals). A backend that cannot (SQLite) has `NoChangeFeed`: other
processes' changes are found by polling alone, as before. Polling stays the safety net either way:
a feed says when it is live, and while it is not, nothing may be assumed delivered.

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
    """A backend without cross-process wake-ups (SQLite): polling finds other processes'
    changes, so there is nothing to run."""

    async def run(self, sink: WakeSink, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        sink.feed_live(False)
        task_status.started()
