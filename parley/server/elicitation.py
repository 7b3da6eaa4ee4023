"""Putting a pending approval or question to the person behind the MCP client (form elicitation).

Only during a blocking call of a 2025-11-25-or-older client that declared elicitation and has a
back channel (stdio, stateful streamable HTTP). A 2026-07-28 client gets the interrupt through
an input-required result or a task instead (later); any client can always use the tools.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp.server.mcpserver import Context
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from parley.runtime.service import AskHuman
from parley.storage.base import InterruptRecord, Resolution

logger = logging.getLogger(__name__)


def _can_elicit(ctx: Context) -> bool:
    session = ctx.request_context.session
    caps = session.client_capabilities
    return bool(session.can_send_request and caps is not None and caps.elicitation is not None)


def approval_form(interrupt: InterruptRecord) -> tuple[str, dict[str, Any]]:
    p = interrupt.payload
    message = (
        f"The agent wants to call {p.get('tool')} ({p.get('effect')}) with {p.get('arguments')}. Allow it?"
    )
    schema = {
        "type": "object",
        "properties": {
            "decision": {"type": "string", "title": "Decision", "enum": ["approve", "deny"]},
            "reason": {"type": "string", "title": "Reason (optional)", "maxLength": 2000},
        },
        "required": ["decision"],
    }
    return message, schema


def question_form(interrupt: InterruptRecord) -> tuple[str, dict[str, Any]]:
    p = interrupt.payload
    choices = list(p.get("choices") or [])
    if choices and not p.get("allows_free_text"):
        answer: dict[str, Any] = {"type": "string", "title": "Answer", "enum": choices}
    else:
        answer = {"type": "string", "title": "Answer", "minLength": 1, "maxLength": 20_000}
        if choices:
            answer["description"] = "Suggested: " + ", ".join(choices)
    return str(p.get("question") or "The agent asks a question."), {
        "type": "object",
        "properties": {"answer": answer},
        "required": ["answer"],
    }


def resolution_from(interrupt: InterruptRecord, result: ElicitResult) -> Resolution | None:
    if result.action == "cancel":
        return None  # dismissed without a choice: it stays pending
    content = result.content or {}
    if interrupt.kind == "approval":
        if result.action == "decline":
            return Resolution(approved=False, reason="declined in the client")
        reason = content.get("reason")
        return Resolution(
            approved=content.get("decision") == "approve", reason=str(reason) if reason else None
        )
    if result.action == "decline":
        return Resolution(declined=True)
    answer = content.get("answer")
    return Resolution(answer=str(answer)) if isinstance(answer, str) and answer.strip() else None


def ask_human_through(ctx: Context) -> AskHuman | None:
    """An AskHuman for this request, or None when the client cannot be asked now."""
    if not _can_elicit(ctx):
        return None
    session = ctx.request_context.session
    request_id = ctx.request_context.request_id

    async def ask(interrupt: InterruptRecord) -> Resolution | None:
        message, schema = (
            approval_form(interrupt) if interrupt.kind == "approval" else question_form(interrupt)
        )
        try:
            result = await session.elicit_form(message, schema, related_request_id=request_id)
        except Exception as exc:
            # The client refused or broke off; the interrupt stays pending for the tools.
            logger.info("elicitation for %s failed: %s", interrupt.id, type(exc).__name__)
            return None
        return resolution_from(interrupt, result)

    return ask


# ---------------------------------------------------------------------- MRTR (2026-07-28)


def can_ask_by_input_required(ctx: Context) -> bool:
    """A 2026-07-28 client that declared elicitation: interrupts go out as an input-required
    result, and the client retries the same call with the answers."""
    session = ctx.request_context.session
    caps = session.client_capabilities
    return (
        ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and caps is not None and caps.elicitation is not None
    )


def input_key(interrupt: InterruptRecord) -> str:
    return f"{interrupt.kind}:{interrupt.id}"


def input_required(pending: list[InterruptRecord], state: dict[str, Any]) -> InputRequiredResult:
    requests: dict[str, Any] = {}
    for interrupt in pending:
        message, schema = (
            approval_form(interrupt) if interrupt.kind == "approval" else question_form(interrupt)
        )
        requests[input_key(interrupt)] = ElicitRequest(
            params=ElicitRequestFormParams(message=message, requested_schema=schema)
        )
    return InputRequiredResult(input_requests=requests, request_state=json.dumps(state))


def answers_from(ctx: Context, pending: list[InterruptRecord]) -> list[tuple[InterruptRecord, Resolution]]:
    """The retried call's answers, matched to interrupts that are still pending."""
    responses = ctx.input_responses or {}
    answered = []
    for interrupt in pending:
        response = responses.get(input_key(interrupt))
        if isinstance(response, ElicitResult):
            resolution = resolution_from(interrupt, response)
            if resolution is not None:
                answered.append((interrupt, resolution))
    return answered


def retry_state(ctx: Context) -> dict[str, Any] | None:
    """The state we sent with an input-required result (sealed and checked by the SDK)."""
    raw = ctx.request_state
    if not raw:
        return None
    try:
        state = json.loads(raw)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None
