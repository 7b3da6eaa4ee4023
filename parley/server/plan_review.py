"""A draft plan put to the person behind the MCP client, in place: when a turn tool's planning turn
ends with a draft and the client can show forms, the person is asked to approve it there (form
elicitation on the back channel, or, for a 2026-07-28 client, an input-required result its retry
answers). Approving runs execute_plan for that revision; anything else leaves the draft for the
tools (execute_plan, send_message with feedback, discard_plan), which always work."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from mcp.server.mcpserver import Context
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)
from pydantic import ValidationError

from parley.core.plans import PlanState
from parley.errors import RequestError
from parley.runtime.access import Principal
from parley.runtime.service import MessagesPage, SessionService, TurnOutcome, Waiting
from parley.server.elicitation import can_ask_by_input_required, can_elicit, creating_task

logger = logging.getLogger(__name__)

APPROVE = "approve"
# How much of the plan the form shows; get_session shows all of it.
MAX_FORM_CHARS = 4000


def plan_form(plan: PlanState) -> tuple[str, dict[str, Any]]:
    """The question and the form of a draft's review."""
    lines = [f"{i}. {todo.get('content', '')}" for i, todo in enumerate(plan.todos, start=1)]
    shown = "\n".join(lines)
    if len(shown) > MAX_FORM_CHARS:
        shown = shown[:MAX_FORM_CHARS] + "\n(the rest of the plan: get_session shows all of it)"
    message = (
        f"The agent proposes this plan (revision {plan.revision}). Approve it and let the agent act "
        f"on it with all its tools? Tool calls that need approval still ask.\n\n{shown}"
    )
    schema = {
        "type": "object",
        "properties": {
            "decision": {"type": "string", "title": "Decision", "enum": [APPROVE, "keep reviewing"]}
        },
        "required": ["decision"],
    }
    return message, schema


def approved_by(result: ElicitResult) -> bool:
    return result.action == "accept" and (result.content or {}).get("decision") == APPROVE


def input_key(plan: PlanState) -> str:
    return f"plan:{plan.revision}"


def _draft(outcome: TurnOutcome) -> PlanState | None:
    """The draft a turn tool's outcome leaves for review (None: nothing to review)."""
    plan = outcome.plan
    if outcome.mode != "planning" or outcome.status != "answered" or plan is None or plan.status != "draft":
        return None
    return plan


class PlanReview:
    def __init__(self, service: SessionService) -> None:
        self._service = service

    async def after_turn(
        self, ctx: Context, who: Principal, outcome: TurnOutcome, waiting: Waiting
    ) -> TurnOutcome | CallToolResult:
        """The outcome as it is; or, when it leaves a draft this person may approve and the client
        can be asked: the executing turn's outcome once approved in place, or (2026-07-28) an
        input-required result that asks."""
        plan = _draft(outcome)
        if plan is None or creating_task(ctx):
            return outcome
        if not await self._service.access.may_answer_as_person(who, outcome.session_id):
            return outcome
        if can_ask_by_input_required(ctx):
            message, schema = plan_form(plan)
            request = ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))
            state = {"session_id": outcome.session_id, "plan_revision": plan.revision}
            return cast(
                CallToolResult,
                InputRequiredResult(
                    input_requests={input_key(plan): request}, request_state=json.dumps(state)
                ),
            )
        session = ctx.request_context.session
        if not can_elicit(session):
            return outcome
        message, schema = plan_form(plan)
        request = ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))
        try:
            result = await session.send_request(
                request,
                ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_context.request_id),
            )
        except Exception as exc:
            # The client refused or broke off: the draft stays for the tools.
            logger.info("plan review by elicitation failed: %s", type(exc).__name__)
            return outcome
        return await self._decided(who, outcome, plan, approved_by(result), waiting)

    async def resumed(
        self, ctx: Context, who: Principal, state: Mapping[str, Any], waiting: Waiting
    ) -> TurnOutcome:
        """The retry of an input-required plan review: approve if the person did, else the
        session's latest turn as it is."""
        session_id = str(state.get("session_id", ""))
        revision = state.get("plan_revision")
        details = await self._service.reads.get_session(
            who, session_id, MessagesPage(limit=1), Waiting(seconds=0)
        )
        last = details.last_turn
        assert last is not None, "a plan review follows a planning turn"
        outcome = await self._service.reads.turn_outcome(last)
        plan = _draft(outcome)
        if plan is None or plan.revision != revision:
            return outcome
        response = (ctx.input_responses or {}).get(input_key(plan))
        try:
            answer = ElicitResult.model_validate(response) if isinstance(response, Mapping) else response
        except ValidationError:
            answer = None
        approved = isinstance(answer, ElicitResult) and approved_by(answer)
        return await self._decided(who, outcome, plan, approved, waiting)

    async def _decided(
        self, who: Principal, outcome: TurnOutcome, plan: PlanState, approved: bool, waiting: Waiting
    ) -> TurnOutcome:
        if not approved:
            note = (
                f"The plan (revision {plan.revision}) was not approved in your client: it stays a draft. "
                "Send feedback to revise it, approve it with execute_plan, or discard_plan."
            )
            return replace(outcome, notes=[*outcome.notes, note])
        try:
            executed = await self._service.plans.execute_plan(
                who, outcome.session_id, plan.revision, waiting, path="person", via="elicitation"
            )
        except RequestError as exc:
            return replace(outcome, notes=[*outcome.notes, f"Your approval in the client was refused: {exc}"])
        note = f"You approved the plan (revision {plan.revision}) in your client, which started its executing turn."
        return replace(executed, notes=[note, *executed.notes])
