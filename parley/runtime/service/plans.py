"""The commands of plan mode: execute_plan (a person approves one revision of a session's plan,
which starts the executing turn) and discard_plan (a draft dropped). Who may approve follows the
agent's approver policy, as for tool calls; approving grants nothing else."""

from __future__ import annotations

from parley.config import effective_limits
from parley.core import plans
from parley.core.ids import SessionId
from parley.core.records import QueuedMessageRecord, SessionRecord
from parley.errors import (
    InvalidArgument,
    PlanRefused,
    RateLimited,
    RequestError,
    SessionClosed,
    SessionNotFound,
)
from parley.runtime import audit
from parley.runtime.access import DecisionPath, Principal, may_see
from parley.runtime.fair_use import FairUse
from parley.runtime.faults import FaultPoints
from parley.runtime.service.checks import Checks
from parley.runtime.service.messages import ended_reason
from parley.runtime.service.outcomes import TurnOutcome
from parley.runtime.service.parts import Parts
from parley.runtime.service.requests import Waiting
from parley.runtime.service.waits import Waits
from parley.runtime.tracing import current_trace_context

# Why an approval or a discard was refused, by its outcome (plans.ApproveOutcome, DiscardOutcome).
_REFUSALS = {
    "stale": "the plan is at revision {current}, not {revision}: read it again with get_session and "
    "approve the revision you reviewed.",
    "no_plan": "it has no plan to approve (its plan is {status}); a planning turn writes one.",
    "already_approved": "revision {revision} was already approved, and its executing turn started "
    "then; approving it again would run the plan twice. A plan the executing turn revises may be "
    "approved at its new revision.",
    "busy": "it is not waiting for a message (a turn runs or waits, or a message is queued; perhaps "
    "another approval came first); try again once the session is idle.",
    "turn_limit": "it has used all the turns its agent allows, so the plan cannot be executed.",
    "no_draft": "it has no draft to discard and is not in plan mode (its plan is {status}).",
}


class PlanCommands:
    def __init__(
        self, parts: Parts, checks: Checks, waits: Waits, fair_use: FairUse, faults: FaultPoints
    ) -> None:
        self._parts = parts
        self._checks = checks
        self._waits = waits
        self._fair_use = fair_use
        self._faults = faults

    async def execute_plan(
        self,
        caller: Principal,
        session_id: str,
        revision: int,
        waiting: Waiting,
        path: DecisionPath = "tool",
        via: str = "tool",
    ) -> TurnOutcome:
        """Approve `revision` of the plan and start the executing turn; wait, bounded, for it."""
        p = self._parts
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
            raise InvalidArgument(
                "revision", "must be the plan's revision (a whole number from 1) that you reviewed"
            )
        session = await p.access.decidable(caller, session_id, audit.EXECUTE_PLAN, [str(revision)])
        wait_s = self._checks.wait_s(waiting.seconds)
        await p.access.check_decider(caller, session, path, audit.EXECUTE_PLAN, [str(revision)])
        agent = p.agents.get(session.agent)
        limits = effective_limits(agent.limits, session.settings) if agent else None
        now = p.clock()
        message = executing_message(session.id, revision, now)
        entry = p.audit.entry(
            caller, audit.EXECUTE_PLAN, session_id=session.id, target=message.id, revision=revision, via=via
        )
        max_turns = limits.max_turns if limits is not None else session.turn_count
        # The executing turn counts like a message the approver sent (fair use, running turns).
        claim = self._fair_use.claim(caller, new_session=False, message=True, now=now)
        await self._faults.hit("plan_approving", session.id)
        try:
            outcome = await p.steps.approve_plan(
                session.id, session.owner, revision, message, max_turns, caller.id, now, entry, claim
            )
        except RateLimited as exc:
            await p.audit.refused(
                caller, audit.EXECUTE_PLAN, session.id, str(revision), str(exc), reason="limit"
            )
            raise
        await self._faults.hit("plan_approved", session.id)
        if outcome != "approved":
            refusal = await self._refusal(session, outcome, revision, "execute_plan")
            await p.audit.refused(
                caller, audit.EXECUTE_PLAN, session.id, str(revision), str(refusal), reason=outcome
            )
            raise refusal
        p.signals.work_available(session.id)
        if not may_see(caller, session.owner):
            # An approver who may not read the session learns only that the approval stands.
            return TurnOutcome(
                session_id=session.id,
                turn_id=None,
                status="running",
                notes=[
                    f"Recorded: you approved revision {revision} as an approver of agent '{session.agent}'. "
                    f"The session belongs to {session.owner}, who sees how it goes on."
                ],
            )
        person = p.access.person(caller, session, waiting.ask_human)
        return await self._waits.wait_for_message(session.id, message.id, wait_s, waiting.on_progress, person)

    async def discard_plan(self, caller: Principal, session_id: str) -> SessionRecord:
        """Drop the session's draft; the next message is an ordinary turn. Returns the session."""
        p = self._parts
        session = await p.access.visible(caller, session_id, audit.DISCARD_PLAN)
        entry = p.audit.entry(caller, audit.DISCARD_PLAN, session_id=session.id)
        outcome = await p.steps.discard_plan(session.id, session.owner, p.clock(), entry)
        if outcome != "discarded":
            refusal = await self._refusal(session, outcome, session.plan_revision, "discard_plan")
            await p.audit.refused(caller, audit.DISCARD_PLAN, session.id, None, str(refusal), reason=outcome)
            raise refusal
        latest = await p.store.get_session(session.id)
        return latest or session

    async def _refusal(self, session: SessionRecord, outcome: str, revision: int, command: str) -> Exception:
        latest = await self._parts.store.get_session(session.id) or session
        return refusal(latest, outcome, revision, command)


def executing_message(session_id: SessionId, revision: int, now: float) -> QueuedMessageRecord:
    """The queued message an approval of `revision` starts the executing turn with."""
    return QueuedMessageRecord.new(
        session_id,
        plans.execution_note(revision),
        now=now,
        trace_context=current_trace_context(),
        mode="executing",
    )


def refusal(latest: SessionRecord, outcome: str, revision: int, command: str) -> RequestError:
    """Why `command` (execute_plan or discard_plan) was refused, by its outcome, told from the
    session as it is now."""
    if outcome == "not_found":
        return SessionNotFound(latest.id)
    if outcome == "closed":
        return SessionClosed(latest.id, ended_reason(latest))
    why = _REFUSALS[outcome].format(
        current=latest.plan_revision, revision=revision, status=latest.plan_status
    )
    return PlanRefused(latest.id, outcome, f"{command} refused: {why}", latest.plan_revision)
