"""A turn started in the transaction that claims a session's lease.

Most claims are of a session a message just woke: its driver's first act is to start the turn
that message asks for. Deciding that in the claim's own transaction saves a transaction (two
round trips on PostgreSQL) per turn. The decision is the one the driver makes itself
(driver.py's `_start_turn`): only when the session runs, is not parked and has no turn, and only
on a definition of its agent this process has at hand (a pinned version it would have to read
is left to the driver).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from parley.core import turn_steps
from parley.core.changes import Changes, SessionSnapshot, SnapshotScope
from parley.core.ids import TurnId
from parley.core.records import AgentVersionRecord, SessionRecord, TurnRecord
from parley.runtime.agent_catalog import AgentCatalog

# What a step reads: the session, its current turn with its calls, and the queue (for steering).
STEP_VIEW = SnapshotScope(interrupts=False)


@dataclass(frozen=True, slots=True)
class StartedTurn:
    """A turn a decision started, with what the driver does once it is committed."""

    turn: TurnRecord
    # The definition it runs on, and whether the turn's transaction stored it.
    version: AgentVersionRecord | None
    stored: bool
    # The session's first turn: its messages came whole with the snapshot (no summary yet).
    fresh: bool
    # The transcript's messages the start read back from this sequence number on (None: none).
    messages_from: int | None


def is_parked(session: SessionRecord, now: float) -> bool:
    """Waiting for a person, or for a timer that is not due: nothing to drive now."""
    not_due = session.wake_at is None or session.wake_at > now
    if session.status == "waiting_for_input":
        return not_due
    return (
        session.status == "running" and session.phase == "waiting" and session.wake_at is not None and not_due
    )


def is_fresh(session: SessionRecord) -> bool:
    """A session that never ran a turn and copies none (a fork does): it has no message yet but
    the ones its first turn takes."""
    return session.turn_count == 0 and session.parent_session_id is None


def start_look(session: SessionRecord, next_seq: int | None) -> SnapshotScope:
    """What a turn's start reads back for its first step: the step's view, with the transcript's
    messages from `next_seq` (what the driver's copy lacks; all of them for a fresh session)."""
    return replace(STEP_VIEW, messages_from=0 if is_fresh(session) else next_seq)


@dataclass(frozen=True, slots=True)
class StartOnClaim:
    """The decision a claim makes: start the session's next turn as `turn_id` at `now`."""

    agents: AgentCatalog
    turn_id: TurnId
    now: float
    # The first message the driver's copy of the transcript lacks (None: it has none).
    next_seq: int | None
    stopping: Callable[[], bool]

    def decide(self, snapshot: SessionSnapshot) -> tuple[StartedTurn | None, Changes]:
        session = snapshot.session
        if (
            self.stopping()
            or session.status != "running"
            or session.current_turn_id is not None
            or is_parked(session, self.now)
        ):
            return None, Changes()
        pin = session.agent_version_pin
        if pin is not None and pin != self.agents.version(session.agent):
            return None, Changes()  # a version the driver may have to read first
        version, store = self.agents.for_new_turn(session.agent, self.now)
        turn, changes = turn_steps.start_turn(snapshot, self.turn_id, self.now, version, store_version=store)
        if turn is None:
            return None, changes
        look = self.after(snapshot)
        return StartedTurn(turn, version, store, is_fresh(session), look.messages_from), changes

    def after(self, snapshot: SessionSnapshot) -> SnapshotScope:
        return start_look(snapshot.session, self.next_seq)
