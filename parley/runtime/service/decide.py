"""The commands that decide what a session waits on: approve (or reject) tool calls, answer (or
decline) a question, and the retry of an input-required round that carries a person's answers;
each then waits, bounded, for the resumed turn."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import replace

from parley.core.ids import TurnId
from parley.core.records import InterruptRecord, Resolution, SessionRecord
from parley.core.transitions import opens_a_link
from parley.errors import DecisionConflict, InvalidArgument, OwnerOnly, RequestError
from parley.runtime import audit
from parley.runtime.access import Principal, may_see
from parley.runtime.decisions import Decision, Decisions
from parley.runtime.downstream_links import OPENED
from parley.runtime.service.checks import Checks
from parley.runtime.service.outcomes import TurnOutcome, turn_view, waits_for_input
from parley.runtime.service.parts import Parts
from parley.runtime.service.persons import PersonAnswers
from parley.runtime.service.requests import QuestionAnswer, Waiting
from parley.runtime.service.waits import Waits

# A resumed turn, and the notes of the decision that resumed it (decisions.Decisions).
Resumed = tuple[TurnId, list[str]]


class DecisionCommands:
    def __init__(
        self, parts: Parts, checks: Checks, waits: Waits, decisions: Decisions, persons: PersonAnswers
    ) -> None:
        self._parts = parts
        self._checks = checks
        self._waits = waits
        self._decisions = decisions
        self._persons = persons

    async def approve(
        self, caller: Principal, session_id: str, decisions: Sequence[Decision], waiting: Waiting
    ) -> TurnOutcome:
        p = self._parts
        targets = [d.interrupt_id for d in decisions]
        session = await p.access.decidable(caller, session_id, audit.APPROVE, targets)
        wait_s = self._checks.wait_s(waiting.seconds)
        await p.access.check_decider(caller, session, "tool", audit.APPROVE, targets)
        try:
            resumed = await self._decisions.approve(session, decisions, "caller", session.owner)
        except RequestError as exc:
            for d in decisions:
                await p.audit.refused(
                    caller,
                    audit.APPROVE if d.approved else audit.REJECT,
                    session.id,
                    d.interrupt_id,
                    str(exc),
                )
            raise
        for d in decisions:
            action = audit.APPROVE if d.approved else audit.REJECT
            await p.audit.record(caller, action, session_id=session.id, target=d.interrupt_id, via="tool")
        p.signals.work_available(session.id)
        return await self._after_decision(caller, session, resumed, wait_s, waiting)

    async def open_page(self, caller: Principal, session_id: str, interrupt_id: str) -> str:
        """The session's owner opens a page a downstream server asked them to visit: the question
        is answered (the server is told they accepted) and its address returned for the browser
        to go to. Anyone else is refused and nothing changes."""
        p = self._parts
        session = await p.access.visible(caller, session_id, audit.OPEN_PAGE, [interrupt_id])
        if not hmac.compare_digest(session.owner.encode(), caller.id.encode()):
            await p.audit.refused(
                caller, audit.OPEN_PAGE, session.id, interrupt_id, "not the session's owner"
            )
            raise OwnerOnly("Opening a page a server asks for")
        interrupt = await self._decisions.interrupt_of(session, interrupt_id)
        url = (interrupt.payload.get("downstream") or {}).get("url")
        if not opens_a_link(interrupt) or not isinstance(url, str):
            raise InvalidArgument("interrupt_id", f"{interrupt_id} is not a page to open")
        result = await p.steps.resolve_interrupt(
            session.id, interrupt.id, Resolution(answer=OPENED), caller.id, p.clock(), session.owner
        )
        if result.outcome != "resolved":
            raise DecisionConflict(interrupt_id, "the page was opened, declined or expired before")
        await p.audit.record(
            caller, audit.OPEN_PAGE, session_id=session.id, target=interrupt_id, via="browser"
        )
        # The open call takes the answer (asked in place), or the call goes back to its server.
        p.signals.notify(session.id)
        p.signals.work_available(session.id)
        return url

    async def answer_question(
        self, caller: Principal, session_id: str, answer: QuestionAnswer, waiting: Waiting
    ) -> TurnOutcome:
        p = self._parts
        interrupt_id = answer.interrupt_id
        action = audit.DECLINE if answer.decline else audit.ANSWER
        session = await p.access.decidable(caller, session_id, action, [interrupt_id])
        wait_s = self._checks.wait_s(waiting.seconds)
        await p.access.check_decider(caller, session, "tool", action, [interrupt_id])
        try:
            resumed = await self._decisions.answer(
                session, interrupt_id, answer.answer, answer.decline, "caller", session.owner
            )
        except RequestError as exc:
            await p.audit.refused(caller, action, session.id, interrupt_id, str(exc))
            raise
        await p.audit.record(caller, action, session_id=session.id, target=interrupt_id, via="tool")
        p.signals.work_available(session.id)
        return await self._after_decision(caller, session, resumed, wait_s, waiting)

    async def _after_decision(
        self, caller: Principal, session: SessionRecord, resumed: Resumed, wait_s: float, waiting: Waiting
    ) -> TurnOutcome:
        """What a decider learns: the owner (and parley:admin) the resumed turn's outcome; an
        approver who may not read the session only whether the turn still waits, and for what."""
        turn_id, notes = resumed
        if may_see(caller, session.owner):
            person = self._parts.access.person(caller, session, waiting.ask_human)
            outcome = await self._waits.wait_for_turn(
                session.id, turn_id, wait_s, waiting.on_progress, person
            )
            return replace(outcome, notes=notes + outcome.notes)
        snapshot = await self._parts.steps.look(session.id, turn_view(turn_id))
        waiting_now = snapshot is not None and waits_for_input(snapshot.session, turn_id)
        pending = (
            [i for i in snapshot.interrupts if i.status == "pending"] if snapshot and waiting_now else []
        )
        return TurnOutcome(
            session_id=session.id,
            turn_id=turn_id,
            status="waiting_for_input" if pending else "running",
            pending=pending,
            notes=[
                *notes,
                f"Recorded: you decided as an approver of agent '{session.agent}'. The session belongs to "
                f"{session.owner}, who sees how the turn goes on.",
            ],
        )

    async def resume_with_answers(
        self,
        caller: Principal,
        session_id: str,
        turn_id: str,
        answers: Sequence[tuple[InterruptRecord, Resolution]],
        waiting: Waiting,
    ) -> TurnOutcome:
        """The retry of a call that returned an input-required result: apply the person's answers
        (the message was queued by the first call and is not queued again), then keep waiting."""
        session = await self._parts.access.visible(caller, session_id)
        wait_s = self._checks.wait_s(waiting.seconds)
        await self._persons.apply_answers(caller, session.id, answers, via="mrtr")
        return await self._waits.wait_for_turn(session.id, TurnId(turn_id), wait_s, waiting.on_progress)
