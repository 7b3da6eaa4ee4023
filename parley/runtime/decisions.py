"""Resolving interrupts: approvals and answers, from the MCP tools, elicitation and the CLI.

Every path goes through `Store.resolve_interrupt`, so the first decision to commit wins;
repeating it succeeds as "already resolved", contradicting it is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from parley.config import AgentConfig
from parley.core.ids import SessionId, TurnId, is_interrupt_id
from parley.core.records import InterruptRecord, Resolution, ResolveResult, SessionRecord
from parley.core.transitions import opens_a_link
from parley.errors import DecisionConflict, InterruptNotFound, InvalidArgument
from parley.runtime.session_steps import SessionSteps
from parley.runtime.text import NO_VISIBLE_TEXT, has_visible_text
from parley.runtime.tracing import Tracing, is_installed, resolution_name
from parley.storage.ports import Store

MAX_ANSWER_CHARS = 20_000
MAX_REASON_CHARS = 2_000


@dataclass(frozen=True, slots=True)
class Decision:
    interrupt_id: str
    approved: bool
    reason: str | None = None


def describe(interrupt: InterruptRecord) -> str:
    res = interrupt.resolution or {}
    if interrupt.status == "approved":
        return "approved"
    if interrupt.status == "expired":
        return "expired at its deadline"
    if interrupt.status == "rejected":
        return "rejected" + (f" ({res.get('reason')})" if res.get("reason") else "")
    if interrupt.status == "answered":
        return f"answered '{res.get('answer')}'"
    return interrupt.status


def checked_answer(interrupt: InterruptRecord, answer: str) -> str | None:
    """The answer as stored (a choice in its own spelling), or None when it is not one of the
    choices of a question that allows no free text."""
    choices = list(interrupt.payload.get("choices") or [])
    if not choices or interrupt.payload.get("allows_free_text"):
        return answer
    return next((c for c in choices if c.casefold() == answer.strip().casefold()), None)


class Decisions:
    def __init__(self, store: Store, agents: Mapping[str, AgentConfig], clock: Callable[[], float]) -> None:
        self._store = store
        self._steps = SessionSteps(store)
        self._agents = agents
        self._clock = clock

    async def _interrupts(self, session: SessionRecord, ids: Sequence[str]) -> dict[str, InterruptRecord]:
        known = {i.id: i for i in await self._store.list_interrupts(session.id, pending_only=False)}
        found = {}
        for interrupt_id in ids:
            if not is_interrupt_id(interrupt_id) or interrupt_id not in known:
                raise InterruptNotFound(session.id, interrupt_id)
            found[interrupt_id] = known[interrupt_id]
        return found

    async def interrupt_of(self, session: SessionRecord, interrupt_id: str) -> InterruptRecord:
        """One of the session's interrupts; InterruptNotFound when it has no such one."""
        return (await self._interrupts(session, [interrupt_id]))[interrupt_id]

    async def approve(
        self, session: SessionRecord, decisions: Sequence[Decision], by: str, owner: str | None
    ) -> tuple[TurnId, list[str]]:
        """Apply approval decisions (all checked before any is applied). Returns the turn they
        belong to and notes such as 'already resolved'."""
        if not decisions:
            raise InvalidArgument("decisions", "give at least one {interrupt_id, approved}")
        ids = [d.interrupt_id for d in decisions]
        if len(set(ids)) != len(ids):
            raise InvalidArgument("decisions", "each interrupt_id may appear once")
        for d in decisions:
            if d.reason is not None and len(d.reason) > MAX_REASON_CHARS:
                raise InvalidArgument("decisions.reason", f"may be at most {MAX_REASON_CHARS} characters")
            if d.reason is not None and not has_visible_text(d.reason):
                raise InvalidArgument("decisions.reason", f"{NO_VISIBLE_TEXT}; write why, or leave it out")
        interrupts = await self._interrupts(session, ids)
        for d in decisions:
            interrupt = interrupts[d.interrupt_id]
            if interrupt.kind != "approval":
                raise InvalidArgument(
                    "decisions.interrupt_id",
                    f"{d.interrupt_id} is a question; answer it with answer_question",
                )
            self._check_not_contradicted(interrupt, Resolution(approved=d.approved, reason=d.reason))
        notes = []
        for d in decisions:
            result = await self._steps.resolve_interrupt(
                SessionId(session.id),
                d.interrupt_id,
                Resolution(approved=d.approved, reason=d.reason),
                by,
                self._clock(),
                owner,
            )
            notes += self._note(d.interrupt_id, result.outcome, result.interrupt)
            await self._traced(result, Resolution(approved=d.approved))
        return interrupts[ids[0]].turn_id, notes

    async def answer(
        self,
        session: SessionRecord,
        interrupt_id: str,
        answer: str | None,
        decline: bool,
        by: str,
        owner: str | None,
    ) -> tuple[TurnId, list[str]]:
        if decline and answer is not None:
            raise InvalidArgument("answer", "give an answer or decline=true, not both")
        if not decline and (answer is None or not has_visible_text(answer)):
            raise InvalidArgument("answer", f"{NO_VISIBLE_TEXT}; give an answer or decline=true")
        if answer is not None and len(answer) > MAX_ANSWER_CHARS:
            raise InvalidArgument("answer", f"may be at most {MAX_ANSWER_CHARS} characters")
        interrupt = (await self._interrupts(session, [interrupt_id]))[interrupt_id]
        if interrupt.kind != "question":
            raise InvalidArgument("interrupt_id", f"{interrupt_id} is an approval; decide it with approve")
        if answer is not None and opens_a_link(interrupt):
            raise InvalidArgument(
                "answer",
                "this question is a page to open: the session's owner opens its connect_url in a browser, "
                "signed in to parley; or give decline=true",
            )
        if answer is not None:
            checked = checked_answer(interrupt, answer)
            if checked is None:
                choices = interrupt.payload.get("choices") or []
                raise InvalidArgument("answer", f"must be one of: {', '.join(repr(c) for c in choices)}")
            answer = checked
        resolution = Resolution(answer=answer, declined=decline)
        self._check_not_contradicted(interrupt, resolution)
        result = await self._steps.resolve_interrupt(
            SessionId(session.id), interrupt_id, resolution, by, self._clock(), owner
        )
        await self._traced(result, resolution)
        return interrupt.turn_id, self._note(interrupt_id, result.outcome, result.interrupt)

    async def _traced(self, result: ResolveResult, resolution: Resolution) -> None:
        """The wait on a person as a span (parley.await_approval / await_question) in the turn's
        trace, linked to the request that ended it; nothing is read when tracing is off."""
        interrupt = result.interrupt
        if result.outcome != "resolved" or interrupt is None or not is_installed():
            return
        turn = await self._store.get_turn(interrupt.turn_id)
        queued = (
            await self._store.get_queued(turn.queued_message_id) if turn and turn.queued_message_id else None
        )
        Tracing(enabled=True).interrupt_waited(
            kind=interrupt.kind,
            interrupt_id=interrupt.id,
            session_id=interrupt.session_id,
            raised_at_s=interrupt.created_at,
            resolved_at_s=self._clock(),
            resolution=resolution_name(resolution.approved, resolution.declined, resolution.expired),
            turn_context=queued.trace_context if queued is not None else None,
        )

    @staticmethod
    def _check_not_contradicted(interrupt: InterruptRecord, resolution: Resolution) -> None:
        if interrupt.status == "pending":
            return
        if interrupt.status == "cancelled":
            raise InvalidArgument(
                "interrupt_id", f"{interrupt.id} is no longer pending: its turn ended before a decision"
            )
        res = interrupt.resolution or {}
        if interrupt.kind == "approval":
            same = not res.get("expired") and bool(res.get("approved", False)) == bool(resolution.approved)
        elif res.get("declined") or resolution.declined:
            same = bool(res.get("declined")) == resolution.declined and not res.get("expired")
        else:
            same = res.get("answer") == resolution.answer
        if not same:
            raise DecisionConflict(interrupt.id, describe(interrupt))

    @staticmethod
    def _note(interrupt_id: str, outcome: str, interrupt: InterruptRecord | None) -> list[str]:
        if outcome == "already_resolved" and interrupt is not None:
            return [f"{interrupt_id} was already resolved ({describe(interrupt)}); nothing changed."]
        if outcome == "conflict" and interrupt is not None:
            raise DecisionConflict(interrupt_id, describe(interrupt))
        if outcome == "not_pending":
            raise InvalidArgument("interrupt_id", f"{interrupt_id} is no longer pending: its turn ended")
        return []
