"""The caller's waits, all on one bounded-wait primitive (`Waits.until`): for the turn that takes
a message, for a turn to rest, for a session to rest. A wait is only the caller's: cancelling it
(a client timeout, a dropped connection) never touches the turn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TypeVar

import anyio

from parley.core.changes import SessionSnapshot
from parley.core.ids import QueuedMessageId, SessionId, TurnId
from parley.core.records import SessionRecord
from parley.core.states import TURN_ENDED
from parley.errors import SessionNotFound
from parley.runtime.progress import ProgressFeed, ProgressFn
from parley.runtime.service.outcomes import TurnOutcome, outcome, turn_view, waits_for_input
from parley.runtime.service.parts import Parts
from parley.runtime.service.persons import PersonAnswers
from parley.runtime.session_access import Person
from parley.runtime.signals import Watch

T = TypeVar("T")


class _Again:
    """What a look of `until` answers to look again at once (something changed it already knows of)."""


AGAIN = _Again()

# A look of `until`: told whether the wait is over (then it must answer), it answers, says
# AGAIN, or None to wait for the next change.
Look = Callable[[bool], Awaitable[T | _Again | None]]


@dataclass(frozen=True, slots=True)
class _Follow:
    """Who follows a turn while it is waited for: its progress feed, and the person asked about
    its interrupts (None: nobody is asked)."""

    progress: ProgressFeed
    person: Person | None


class Waits:
    def __init__(self, parts: Parts, persons: PersonAnswers) -> None:
        self._parts = parts
        self._persons = persons
        # Set when the only client left (stdin closed): every wait answers at once.
        self._waits_ended = False

    def end_waits(self) -> None:
        """The client is gone: every wait, running or still to come, answers now with what it has
        (a turn still running says so, with its session id) instead of waiting out its time."""
        self._waits_ended = True
        self._parts.signals.everything_changed()

    @property
    def poll_interval_s(self) -> float:
        """How often a wait looks at the database by itself (longer while the change feed is live)."""
        return self._parts.signals.poll_interval_s

    async def until(
        self,
        session_id: SessionId,
        wait_s: float,
        look: Look[T],
        progress: ProgressFeed | None = None,
        watch: Watch | None = None,
    ) -> T:
        """The one bounded wait: look at the session until `look` has an answer, waking on each
        change of the session (or every poll interval, for changes made by other processes).
        `look(last)` is told when the wait is over and must answer then; AGAIN looks at once.
        `watch`: the session's watch the caller already holds (its wake-ups carry over)."""
        signals = self._parts.signals
        deadline = anyio.current_time() + wait_s
        # Watched from before the first look: a change committed while a look reads wakes the next wait.
        with nullcontext(watch) if watch is not None else signals.watching(session_id) as changes:
            while True:
                remaining = deadline - anyio.current_time()
                found = await look(remaining <= 0 or self._waits_ended)
                if found is AGAIN:
                    continue
                if found is not None:
                    return found  # type: ignore[return-value]
                await changes.wait(min(max(remaining, 0.0), signals.poll_interval_s))
                if progress is not None:
                    await progress.poll()

    async def wait_for_message(
        self,
        session_id: SessionId,
        message_id: QueuedMessageId,
        wait_s: float,
        on_progress: ProgressFn | None = None,
        person: Person | None = None,
        queued_under: Watch | None = None,
    ) -> TurnOutcome:
        """Wait for the turn that consumes this message to rest, at most `wait_s` seconds.
        `queued_under`: the watch the caller held while it committed the message as queued (and
        did not fire for its own commit), so that until the watch fires nothing has taken it."""
        store = self._parts.store
        deadline = anyio.current_time() + wait_s
        progress = await self._progress(session_id, on_progress)

        first = True

        async def taken_by(
            turn_id: TurnId, session: SessionRecord | None, handed: SessionSnapshot | None
        ) -> TurnOutcome:
            """The rest of the wait is the turn's: `session` as last read (a turn seen running
            there is not read again before its next change), `handed` as the watch gave it."""
            remaining = max(0.0, deadline - anyio.current_time())
            running = _runs(session, turn_id)
            known = None if running else handed
            follow = _Follow(progress, person)
            return await self._wait_turn(
                session_id, turn_id, remaining, message_id, follow, (changes, running), known
            )

        async def taken(last: bool) -> TurnOutcome | None:
            nonlocal first
            if first and queued_under is not None and not last:
                # Known queued as of the caller's commit, and every change since wakes the watch.
                first = False
                return None
            handed = None if last else _taking(changes.take_seen(), message_id)
            if handed is not None and handed.turn is not None:
                # The turn that took it, as its start (or end) in this process read it back.
                first = False
                return await taken_by(handed.turn.id, handed.session, handed)
            if first:
                # Just queued: most often not taken yet, and then its session is not needed.
                first, session = False, None
                queued = await store.get_queued(message_id)
            else:
                # After a wake-up, the message and its session in one read: a turn seen running
                # there is not read again before its next change (see _wait_turn's `running`).
                queued, session = await store.get_queued_with_session(message_id, session_id)
            if queued is not None and queued.status == "dropped":
                return _dropped(session_id, message_id, session or await store.get_session(session_id))
            if queued is not None and queued.turn_id is not None:
                return await taken_by(queued.turn_id, session, None)
            if not last:
                return None
            session = session or await store.get_session(session_id)
            return TurnOutcome(
                session_id=session_id,
                turn_id=None,
                status="running",
                queued_message_id=message_id,
                session_status=session.status if session else None,
            )

        # One watch for the message and then its turn: a change committed between the read that
        # found the turn and the turn's wait still wakes it.
        watching = (
            nullcontext(queued_under)
            if queued_under is not None
            else self._parts.signals.watching(session_id)
        )
        with watching as changes:
            return await self.until(session_id, wait_s, taken, progress, changes)

    async def wait_for_turn(
        self,
        session_id: SessionId,
        turn_id: TurnId,
        wait_s: float,
        on_progress: ProgressFn | None = None,
        person: Person | None = None,
    ) -> TurnOutcome:
        """Wait for the turn to rest (or to wait for input), at most `wait_s` seconds."""
        progress = await self._progress(session_id, on_progress)
        return await self._wait_turn(session_id, turn_id, wait_s, None, _Follow(progress, person), None)

    async def wait_until_rest(
        self, session_id: SessionId, wait_s: float, on_progress: ProgressFn | None = None
    ) -> SessionRecord:
        """The session once it runs no turn, or as it is when `wait_s` seconds are over."""
        store = self._parts.store
        progress = await self._progress(session_id, on_progress)

        async def at_rest(last: bool) -> SessionRecord | None:
            session = await store.get_session(session_id)
            if session is None:
                raise SessionNotFound(session_id)
            return session if session.status != "running" or last else None

        return await self.until(session_id, wait_s, at_rest, progress)

    async def _wait_turn(
        self,
        session_id: SessionId,
        turn_id: TurnId,
        wait_s: float,
        message_id: QueuedMessageId | None,
        follow: _Follow,
        seen: tuple[Watch, bool] | None,
        known: SessionSnapshot | None = None,
    ) -> TurnOutcome:
        """`seen`: the watch the caller held while it read, and whether that read saw the turn
        running (then the first look reads nothing: any change since has fired the watch).
        `known`: the session with this turn as handed to the caller's watch, its first look."""
        if seen is None:
            with self._parts.signals.watching(session_id) as opened:
                return await self._wait_turn(
                    session_id, turn_id, wait_s, message_id, follow, (opened, False), known
                )
        steps = self._parts.steps
        progress, person = follow.progress, follow.person
        deadline = anyio.current_time() + wait_s
        asked: set[str] = set()
        watch, running = seen

        async def rested(last: bool) -> TurnOutcome | _Again | None:
            nonlocal running, known
            if not last and running:
                running = False
                return None
            # Handed over with the wake-up (Watch's `seen`): the session with this turn as the
            # change's own transaction left it, so nothing is read.
            handed, known = (None if last else known or watch.take_seen()), None
            if handed is not None and (handed.turn is None or handed.turn.id != turn_id):
                handed = None
            # Else one read: the session with this turn, its calls and its interrupts. Most
            # wake-ups come from a step of the turn still running: the session row says so (a
            # turn that rests leaves it in the same write), and then it is all that is read.
            snapshot = handed or await steps.look(session_id, turn_view(turn_id, settled=not last))
            if not last and snapshot is not None and _runs(snapshot.session, turn_id):
                return None
            turn = snapshot.turn if snapshot is not None else None
            if snapshot is None or turn is None:
                return TurnOutcome(session_id=session_id, turn_id=turn_id, status="running") if last else None
            if turn.status in TURN_ENDED or last:
                await progress.poll()  # what happened last (the end of a streamed text) still goes out
                return outcome(snapshot, turn, message_id)
            if not waits_for_input(snapshot.session, turn_id):
                return None
            new = [i for i in snapshot.interrupts if i.status == "pending" and i.id not in asked]
            if person is None or not new:
                return outcome(snapshot, turn, message_id)
            # Put each new interrupt to the person through the client; an answer resolves it
            # exactly as approve/answer_question would, and the wait goes on at once.
            for interrupt in new:
                asked.add(interrupt.id)
                await self._persons.put_to_person(person, interrupt, deadline)
            return AGAIN

        return await self.until(session_id, wait_s, rested, progress, watch)

    async def _progress(self, session_id: SessionId, on_progress: ProgressFn | None) -> ProgressFeed:
        feed = ProgressFeed(
            self._parts.store, session_id, on_progress, self._parts.runtime.progress_interval_s
        )
        await feed.start()
        return feed


def _runs(session: SessionRecord | None, turn_id: TurnId) -> bool:
    """Whether `session` (as read) is running the turn `turn_id` still."""
    return session is not None and session.current_turn_id == turn_id and session.status == "running"


def _dropped(
    session_id: SessionId, message_id: QueuedMessageId, session: SessionRecord | None
) -> TurnOutcome:
    """The outcome for a message dropped before any turn took it (its session ended)."""
    return TurnOutcome(
        session_id=session_id,
        turn_id=None,
        status="cancelled",
        error="The session ended before this message was taken into a turn.",
        queued_message_id=message_id,
        session_status=session.status if session else None,
    )


def _taking(handed: SessionSnapshot | None, message_id: QueuedMessageId) -> SessionSnapshot | None:
    """`handed` (Watch's `seen`) if its turn is the one that took the message `message_id`."""
    if handed is None or handed.turn is None or handed.turn.queued_message_id != message_id:
        return None
    return handed
