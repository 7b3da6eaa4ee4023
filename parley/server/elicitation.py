"""Putting a pending approval or question to the person behind the MCP client (form elicitation).

During a blocking call (or a 2025-11-25 task's tasks/result) of a 2025-11-25-or-older client that
declared elicitation and has a back channel (stdio, stateful streamable HTTP). A 2026-07-28 client
gets the interrupt through an input-required result or its task's input requests; any client can
always use the tools.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.session import ServerSession
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    RequestId,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from parley.core.records import InterruptRecord, Resolution
from parley.core.transitions import opens_a_link
from parley.runtime.session_access import AskHuman

logger = logging.getLogger(__name__)


# Set (by the task gateway) on the inner run of a call that becomes a task: that run only
# starts the work; the person is asked through the task, not through this call.
CREATING_TASK_META = "dev.parley/creating-task"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"


def creating_task(ctx: Context) -> bool:
    meta = ctx.request_context.meta
    return bool(meta and meta.get(CREATING_TASK_META))


def can_elicit(session: ServerSession) -> bool:
    caps = session.client_capabilities
    return bool(session.can_send_request and caps is not None and caps.elicitation is not None)


def _can_elicit(ctx: Context) -> bool:
    return can_elicit(ctx.request_context.session) and not creating_task(ctx)


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


def connect_request(interrupt: InterruptRecord) -> ElicitRequest | None:
    """The URL-mode elicitation of an authorization_required interrupt: its connect link."""
    url = interrupt.payload.get("connect_url")
    if not isinstance(url, str):
        return None
    message = str(interrupt.payload.get("question") or "Connect your account to go on.")
    return ElicitRequest(params=ElicitRequestURLParams(message=message, url=url, elicitation_id=interrupt.id))


async def point_to_connect_link(
    session: ServerSession, request_id: RequestId | None, interrupt: InterruptRecord
) -> bool:
    """URL-mode elicitation (2025-11-25) of an authorization_required interrupt, to a client that
    declared it: the person is shown parley's connect link (never the authorization server's
    URL). Whatever the client answers, the interrupt waits for the owner's callback. False: the
    client takes no URL elicitation, or the request failed."""
    request = connect_request(interrupt)
    if request is None or not takes_urls(session):
        return False
    try:
        await session.send_request(
            request, ElicitResult, metadata=ServerMessageMetadata(related_request_id=request_id)
        )
    except Exception as exc:
        logger.info("URL elicitation for %s failed: %s", interrupt.id, type(exc).__name__)
        return False
    return True


def ask_human_through(ctx: Context) -> AskHuman | None:
    """An AskHuman for this request, or None when the client cannot be asked now."""
    if not _can_elicit(ctx):
        return None
    return asking(ctx.request_context.session, ctx.request_context.request_id)


def asking(session: ServerSession, request_id: RequestId | None, task_id: str | None = None) -> AskHuman:
    """Ask through form elicitation on the stream of request `request_id`; with `task_id`, the
    elicitation names the task it belongs to (a 2025-11-25 task's tasks/result)."""

    async def ask(interrupt: InterruptRecord) -> Resolution | None:
        if opens_a_link(interrupt):
            if await point_to_connect_link(session, request_id, interrupt):
                # The callback resolves it once the owner has connected; then the asking is
                # withdrawn (or at the caller's deadline), and the wait goes on.
                await anyio.sleep_forever()
            return None
        message, schema = form(interrupt)
        meta = {RELATED_TASK_META: {"taskId": task_id}} if task_id else None
        request = ElicitRequest(
            params=ElicitRequestFormParams(message=message, requested_schema=schema, _meta=meta)
        )
        try:
            result = await session.send_request(
                request, ElicitResult, metadata=ServerMessageMetadata(related_request_id=request_id)
            )
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
        ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        and caps is not None
        and caps.elicitation is not None
        and not creating_task(ctx)
    )


def input_key(interrupt: InterruptRecord) -> str:
    return f"{interrupt.kind}:{interrupt.id}"


def form(interrupt: InterruptRecord) -> tuple[str, dict[str, Any]]:
    return approval_form(interrupt) if interrupt.kind == "approval" else question_form(interrupt)


def takes_urls(session: ServerSession) -> bool:
    """Whether the client declared URL-mode elicitation."""
    caps = session.client_capabilities
    return caps is not None and caps.elicitation is not None and caps.elicitation.url is not None


def askable(interrupt: InterruptRecord, url_mode: bool) -> bool:
    """Whether an input-required round can put the interrupt to the person: an authorization only
    as its connect link, to a client that takes URLs."""
    return not opens_a_link(interrupt) or url_mode


def input_requests(pending: list[InterruptRecord], url_mode: bool = False) -> dict[str, ElicitRequest]:
    """One form per interrupt, keyed by the interrupt (so a key is never reused for another); an
    authorization as its connect link (URL mode), or not at all."""
    requests = {}
    for interrupt in pending:
        if opens_a_link(interrupt):
            request = connect_request(interrupt)
            if url_mode and request is not None:
                requests[input_key(interrupt)] = request
            continue
        message, schema = form(interrupt)
        requests[input_key(interrupt)] = ElicitRequest(
            params=ElicitRequestFormParams(message=message, requested_schema=schema)
        )
    return requests


def input_required(
    pending: list[InterruptRecord], state: dict[str, Any], url_mode: bool = False
) -> InputRequiredResult:
    requests = input_requests(pending, url_mode)
    return InputRequiredResult(input_requests=dict(requests), request_state=json.dumps(state))


def answers_from(ctx: Context, pending: list[InterruptRecord]) -> list[tuple[InterruptRecord, Resolution]]:
    """The retried call's answers, matched to interrupts that are still pending."""
    return match_answers(ctx.input_responses or {}, pending)


def match_answers(
    responses: Mapping[str, Any], pending: list[InterruptRecord]
) -> list[tuple[InterruptRecord, Resolution]]:
    """Answers keyed as input_requests keyed them; unknown keys and malformed answers are ignored."""
    answered = []
    for interrupt in pending:
        if opens_a_link(interrupt):
            continue  # only the owner, opening the link, resolves it
        response = responses.get(input_key(interrupt))
        if isinstance(response, Mapping):
            try:
                response = ElicitResult.model_validate(response)
            except ValidationError:
                continue
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
