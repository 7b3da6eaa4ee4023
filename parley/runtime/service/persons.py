"""Decisions made by the person behind a caller's client: answers to a form, an input-required
round or a task's input, applied as approve/answer_question would apply them; and one interrupt
put to the person until they answer or it is resolved some other way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import anyio

from parley.core.ids import SessionId
from parley.core.records import InterruptRecord, Resolution
from parley.core.transitions import opens_a_link
from parley.runtime import audit
from parley.runtime.access import Principal
from parley.runtime.decisions import checked_answer
from parley.runtime.service.parts import Parts
from parley.runtime.session_access import AskHuman, Person


class PersonAnswers:
    def __init__(self, parts: Parts) -> None:
        self._parts = parts

    async def apply_answers(
        self,
        caller: Principal,
        session_id: str,
        answers: Sequence[tuple[InterruptRecord, Resolution]],
        via: str = "task_input",
    ) -> None:
        """Resolve interrupts with what a person answered through `caller`'s client (a form, an
        input-required round, a task's input). An answer outside the choices leaves its
        interrupt pending, to be asked again; an interrupt resolved meanwhile stays as it is."""
        if not answers:
            return
        access = self._parts.access
        action = audit.ANSWER if answers[0][0].kind == "question" else audit.APPROVE
        session = await access.decidable(caller, session_id, action, [i.id for i, _ in answers])
        await access.check_decider(caller, session, "person", action, [i.id for i, _ in answers])
        for interrupt, resolution in answers:
            await self._resolve(caller, session.id, interrupt, resolution, via)

    async def put_to_person(self, person: Person, interrupt: InterruptRecord, deadline: float) -> None:
        """Ask the person behind a caller's client about one interrupt (withdrawn if it is resolved
        some other way first, or at `deadline` on anyio's clock) and apply what they answer."""
        resolution = await self._ask(person.ask, interrupt, deadline)
        if resolution is not None:
            await self._resolve(person.caller, interrupt.session_id, interrupt, resolution, "elicitation")

    async def _resolve(
        self,
        caller: Principal,
        session_id: SessionId,
        interrupt: InterruptRecord,
        resolution: Resolution,
        via: str,
    ) -> None:
        if opens_a_link(interrupt):
            return  # resolved by the owner opening its link (or the OAuth callback), never by an answer
        if resolution.answer is not None:
            # The form's choices are a hint to the client, not a guarantee.
            checked = checked_answer(interrupt, resolution.answer)
            if checked is None:
                return
            resolution = replace(resolution, answer=checked)
        result = await self._parts.steps.resolve_interrupt(
            session_id, interrupt.id, resolution, "elicitation", self._parts.clock()
        )
        if result.outcome == "resolved":
            await self._parts.audit.record(
                caller,
                _decision_action(interrupt, resolution),
                session_id=session_id,
                target=interrupt.id,
                via=via,
            )
        self._parts.signals.work_available(session_id)

    async def _ask(
        self, ask_human: AskHuman, interrupt: InterruptRecord, deadline: float
    ) -> Resolution | None:
        """Put one interrupt to the person until they answer, the caller's wait ends, or the
        interrupt is resolved some other way (then the prompt is withdrawn)."""
        signals, store = self._parts.signals, self._parts.store
        result: list[Resolution | None] = [None]
        with anyio.move_on_after(max(deadline - anyio.current_time(), 0.0)):
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    result[0] = await ask_human(interrupt)
                    tg.cancel_scope.cancel()

                async def withdraw_when_resolved() -> None:
                    with signals.watching(interrupt.session_id) as changes:
                        while True:
                            await changes.wait(signals.poll_interval_s)
                            pending = await store.list_interrupts(interrupt.session_id, pending_only=True)
                            if all(p.id != interrupt.id for p in pending):
                                tg.cancel_scope.cancel()
                                return

                tg.start_soon(ask)
                tg.start_soon(withdraw_when_resolved)
        return result[0]


def _decision_action(interrupt: InterruptRecord, resolution: Resolution) -> str:
    if interrupt.kind == "approval":
        return audit.APPROVE if resolution.approved else audit.REJECT
    return audit.DECLINE if resolution.declined else audit.ANSWER
