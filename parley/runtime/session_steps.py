"""The rules of transitions.py applied to stored sessions: load the snapshot, decide, write the
changes, all in one transaction of the step port (parley/storage/changes.py)."""

from __future__ import annotations

from parley.ids import SessionId, TurnId
from parley.runtime import transitions
from parley.runtime.transitions import TurnEnd
from parley.storage.base import Resolution, ResolveResult
from parley.storage.changes import StepStore


class SessionSteps:
    def __init__(self, store: StepStore) -> None:
        self._store = store

    async def resolve_interrupt(
        self,
        session_id: SessionId,
        interrupt_id: str,
        resolution: Resolution,
        by: str,
        now: float,
        owner: str | None = None,
    ) -> ResolveResult:
        """Decide an interrupt; the first decision wins (see transitions.resolve_interrupt)."""
        async with self._store.session_transaction(session_id, interrupt_id=interrupt_id) as tx:
            if tx is None:
                return ResolveResult(outcome="not_found")
            result, changes = transitions.resolve_interrupt(
                tx.snapshot, interrupt_id, resolution, by, now, owner
            )
            await tx.apply(changes, now)
            return result

    async def park_turn(self, session_id: SessionId, lease: str, turn_id: TurnId, now: float) -> bool:
        """Park the turn if nothing of it can run now; True if it was parked."""
        async with self._store.session_transaction(session_id, turn_id=turn_id, lease=lease) as tx:
            if tx is None:
                return False
            changes = transitions.park_turn(tx.snapshot)
            if changes is None:
                return False
            await tx.apply(changes, now)
            return True

    async def finish_turn(
        self, session_id: SessionId, lease: str, turn_id: TurnId, end: TurnEnd, now: float
    ) -> None:
        async with self._store.session_transaction(session_id, turn_id=turn_id, lease=lease) as tx:
            if tx is None or tx.snapshot.turn is None:
                return
            await tx.apply(transitions.finish_turn(tx.snapshot, end, now), now)

    async def rest_session(self, session_id: SessionId, lease: str, now: float) -> bool:
        """A session without a turn closes, runs on with its queue, or rests; True if it rests."""
        async with self._store.session_transaction(session_id, lease=lease) as tx:
            if tx is None:
                return True
            rests, changes = transitions.rest_session(tx.snapshot)
            await tx.apply(changes, now)
            return rests
