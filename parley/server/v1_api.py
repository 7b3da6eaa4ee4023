"""Small JSON endpoints for UIs: the same service calls as the MCP tools, with the same checks,
results (the tools' structured content) and `client_message_id` idempotency; errors are problem
details. Bodies are read strictly, as tool arguments are: unknown fields and wrong JSON types are
refused, naming the field."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parley.runtime.decisions import Decision
from parley.runtime.service import (
    ForkRequest,
    MessagesPage,
    QuestionAnswer,
    SendRequest,
    SessionQuery,
    StartRequest,
    Waiting,
)
from parley.runtime.session_labels import session_filter
from parley.server.arguments import argument_errors
from parley.server.json_text import check_unicode
from parley.server.session_tools import DeleteResult
from parley.server.v1_common import BadRequest, V1Context, caller, guarded, json_body, require_json
from parley.server.wire import (
    AgentList,
    CloseResult,
    DeleteSessionResult,
    PendingList,
    SessionList,
    agent_view,
    draft_item,
    outcome_view,
    pending_item,
    session_summary,
    session_view,
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StartBody(_Body):
    agent: str
    message: str | None = None
    kind: Literal["chat", "task"] | None = None
    inputs: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None
    attachments: list[dict[str, Any]] | None = None
    client_message_id: str | None = None
    plan: bool | None = None
    wait_seconds: float | None = None


class MessageBody(_Body):
    message: str | None = None
    steer: bool = False
    queued_message_id: str | None = None
    settings: dict[str, Any] | None = None
    attachments: list[dict[str, Any]] | None = None
    client_message_id: str | None = None
    plan: bool = False
    wait_seconds: float | None = None


class SteerBody(_Body):
    message: str | None = None
    queued_message_id: str | None = None
    client_message_id: str | None = None
    wait_seconds: float | None = None


class CancelBody(_Body):
    turn_id: str | None = None
    wait_seconds: float | None = None


class DecisionBody(_Body):
    interrupt_id: str
    approved: bool
    reason: str | None = None


class ApproveBody(_Body):
    decisions: list[DecisionBody] = Field(min_length=1)
    wait_seconds: float | None = None


class AnswerBody(_Body):
    interrupt_id: str
    answer: str | None = None
    decline: bool = False
    wait_seconds: float | None = None


class CloseBody(_Body):
    wait_seconds: float | None = None


class ExecutePlanBody(_Body):
    revision: int = Field(ge=1)
    wait_seconds: float | None = None


class ForkBody(_Body):
    at_turn: int = Field(ge=0)
    agent_version: str | None = None
    title: str | None = None


class LabelsBody(_Body):
    title: str | None = None
    tags: list[str] | None = None


BodyT = TypeVar("BodyT", bound=_Body)


async def _read(request: Request, model: type[BodyT], what: str) -> BodyT:
    raw = await json_body(request) if (await request.body()) else {}
    check_unicode(raw)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise BadRequest(argument_errors(what, exc)) from None


def _json(model: BaseModel, status: int = 200) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=status)


def _int_param(request: Request, name: str, low: int, high: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be a whole number from {low} to {high}, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"'{name}' must be from {low} to {high}, got {value}")
    return value


def _float_param(request: Request, name: str) -> float | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be a number of seconds, got {raw[:40]!r}") from None


class JsonEndpoints:
    def __init__(self, ctx: V1Context) -> None:
        self._service = ctx.service

    def routes(self) -> list[Route]:
        endpoints = [
            ("/v1/sessions", self._list, "GET"),
            ("/v1/sessions", self._start, "POST"),
            ("/v1/sessions/{session_id}", self._get, "GET"),
            ("/v1/sessions/{session_id}", self._update, "PATCH"),
            ("/v1/sessions/{session_id}", self._delete, "DELETE"),
            ("/v1/sessions/{session_id}/messages", self._send, "POST"),
            ("/v1/sessions/{session_id}/steer", self._steer, "POST"),
            ("/v1/sessions/{session_id}/cancel", self._cancel, "POST"),
            ("/v1/sessions/{session_id}/approve", self._approve, "POST"),
            ("/v1/sessions/{session_id}/answer", self._answer, "POST"),
            ("/v1/sessions/{session_id}/interrupts/{interrupt_id}/open", self._open_page, "POST"),
            ("/v1/sessions/{session_id}/close", self._close, "POST"),
            ("/v1/sessions/{session_id}/queue/{queued_message_id}", self._delete_queued, "DELETE"),
            ("/v1/sessions/{session_id}/plan/execute", self._execute_plan, "POST"),
            ("/v1/sessions/{session_id}/plan/discard", self._discard_plan, "POST"),
            ("/v1/sessions/{session_id}/fork", self._fork, "POST"),
            ("/v1/sessions/{session_id}/attachments/{sha256}", self._attachment, "GET"),
            ("/v1/pending", self._pending, "GET"),
            ("/v1/agents", self._agents, "GET"),
        ]
        return [Route(path, guarded(endpoint), methods=[method]) for path, endpoint, method in endpoints]

    async def _list(self, request: Request) -> Response:
        query = request.query_params
        match = session_filter(
            query.get("title"), query.get("tag"), query.get("created_after"), query.get("created_before")
        )
        sessions, cursor = await self._service.reads.list_sessions(
            caller(request),
            SessionQuery(
                limit=_int_param(request, "limit", 1, 100) or 20,
                status=query.get("status"),
                agent=query.get("agent"),
                cursor=query.get("cursor"),
                owner=query.get("owner"),
                match=match,
            ),
        )
        return _json(SessionList(sessions=[session_summary(s) for s in sessions], next_cursor=cursor))

    async def _get(self, request: Request) -> Response:
        wait_seconds = _float_param(request, "wait_seconds")
        page = MessagesPage(
            start=_int_param(request, "messages_from", 1, 2**53),
            limit=_int_param(request, "messages_limit", 1, 200),
        )
        reads = self._service.reads
        details = await reads.get_session(
            caller(request), request.path_params["session_id"], page, Waiting(seconds=wait_seconds)
        )
        last = await reads.turn_outcome(details.last_turn) if details.last_turn else None
        return _json(session_view(details, last))

    async def _start(self, request: Request) -> Response:
        body = await _read(request, StartBody, "POST /v1/sessions")
        outcome = await self._service.messages.start_session(
            caller(request),
            StartRequest(
                agent=body.agent,
                message=body.message,
                kind=body.kind,
                inputs=body.inputs,
                client_message_id=body.client_message_id,
                settings=body.settings,
                attachments=body.attachments,
                plan=body.plan,
            ),
            Waiting(seconds=body.wait_seconds),
        )
        return _json(outcome_view(outcome), 201)

    async def _send(self, request: Request) -> Response:
        body = await _read(request, MessageBody, "POST /v1/sessions/{id}/messages")
        outcome = await self._service.messages.send_message(
            caller(request),
            SendRequest(
                session_id=request.path_params["session_id"],
                message=body.message,
                client_message_id=body.client_message_id,
                steer=body.steer,
                queued_message_id=body.queued_message_id,
                settings=body.settings,
                attachments=body.attachments,
                plan=body.plan,
            ),
            Waiting(seconds=body.wait_seconds),
        )
        return _json(outcome_view(outcome))

    async def _steer(self, request: Request) -> Response:
        body = await _read(request, SteerBody, "POST /v1/sessions/{id}/steer")
        outcome = await self._service.messages.send_message(
            caller(request),
            SendRequest(
                session_id=request.path_params["session_id"],
                message=body.message,
                client_message_id=body.client_message_id,
                steer=True,
                queued_message_id=body.queued_message_id,
            ),
            Waiting(seconds=body.wait_seconds),
        )
        return _json(outcome_view(outcome))

    async def _cancel(self, request: Request) -> Response:
        body = await _read(request, CancelBody, "POST /v1/sessions/{id}/cancel")
        outcome = await self._service.lifecycle.cancel_turn(
            caller(request),
            request.path_params["session_id"],
            Waiting(seconds=body.wait_seconds),
            body.turn_id,
        )
        return _json(outcome_view(outcome))

    async def _approve(self, request: Request) -> Response:
        body = await _read(request, ApproveBody, "POST /v1/sessions/{id}/approve")
        outcome = await self._service.decisions.approve(
            caller(request),
            request.path_params["session_id"],
            [Decision(d.interrupt_id, d.approved, d.reason) for d in body.decisions],
            Waiting(seconds=body.wait_seconds),
        )
        return _json(outcome_view(outcome))

    async def _answer(self, request: Request) -> Response:
        body = await _read(request, AnswerBody, "POST /v1/sessions/{id}/answer")
        outcome = await self._service.decisions.answer_question(
            caller(request),
            request.path_params["session_id"],
            QuestionAnswer(body.interrupt_id, body.answer, body.decline),
            Waiting(seconds=body.wait_seconds),
        )
        return _json(outcome_view(outcome))

    async def _open_page(self, request: Request) -> Response:
        # JSON only: a cross-site form cannot post here without a CORS preflight.
        require_json(request)
        url = await self._service.decisions.open_page(
            caller(request), request.path_params["session_id"], request.path_params["interrupt_id"]
        )
        return JSONResponse({"url": url}, headers={"Cache-Control": "no-store"})

    async def _delete_queued(self, request: Request) -> Response:
        session_id, queued_message_id = (
            request.path_params["session_id"],
            request.path_params["queued_message_id"],
        )
        status = await self._service.messages.delete_queued_message(
            caller(request), session_id, queued_message_id
        )
        return _json(DeleteResult(session_id=session_id, queued_message_id=queued_message_id, status=status))

    async def _execute_plan(self, request: Request) -> Response:
        body = await _read(request, ExecutePlanBody, "POST /v1/sessions/{id}/plan/execute")
        outcome = await self._service.plans.execute_plan(
            caller(request),
            request.path_params["session_id"],
            body.revision,
            Waiting(seconds=body.wait_seconds),
            via="v1",
        )
        return _json(outcome_view(outcome))

    async def _discard_plan(self, request: Request) -> Response:
        await _read(request, CloseBody, "POST /v1/sessions/{id}/plan/discard")
        session = await self._service.plans.discard_plan(caller(request), request.path_params["session_id"])
        return _json(session_summary(session))

    async def _fork(self, request: Request) -> Response:
        body = await _read(request, ForkBody, "POST /v1/sessions/{id}/fork")
        session = await self._service.forks.fork_session(
            caller(request),
            ForkRequest(
                session_id=request.path_params["session_id"],
                at_turn=body.at_turn,
                agent_version=body.agent_version,
                title=body.title,
            ),
        )
        return _json(session_summary(session), 201)

    async def _close(self, request: Request) -> Response:
        body = await _read(request, CloseBody, "POST /v1/sessions/{id}/close")
        session = await self._service.lifecycle.close_session(
            caller(request), request.path_params["session_id"], body.wait_seconds
        )
        return _json(
            CloseResult(session_id=session.id, status=session.status, closed_reason=session.closed_reason)
        )

    async def _attachment(self, request: Request) -> Response:
        blob = await self._service.reads.attachment(
            caller(request), request.path_params["session_id"], request.path_params["sha256"]
        )
        # The bytes as they came, never rendered here: a download, of the type the sender named.
        headers = {
            "content-disposition": "attachment",
            "x-content-type-options": "nosniff",
            "content-security-policy": "default-src 'none'; sandbox",
            "cache-control": "private, max-age=86400, immutable",
            "etag": f'"{blob.sha256}"',
        }
        return Response(blob.data, media_type=blob.mime_type, headers=headers)

    async def _update(self, request: Request) -> Response:
        body = await _read(request, LabelsBody, "PATCH /v1/sessions/{id}")
        session = await self._service.lifecycle.update_session(
            caller(request), request.path_params["session_id"], body.title, body.tags
        )
        return _json(session_summary(session))

    async def _delete(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        status = await self._service.lifecycle.delete_session(
            caller(request), session_id, _float_param(request, "wait_seconds")
        )
        return _json(DeleteSessionResult(session_id=session_id, status=status))

    async def _pending(self, request: Request) -> Response:
        who = caller(request)
        reads = self._service.reads
        limit = _int_param(request, "limit", 1, 200) or 50
        found = await reads.list_pending(who, limit)
        drafts = await reads.list_drafts(who, limit)
        return _json(
            PendingList(
                pending=[pending_item(p, reads.decider(who, p)) for p in found],
                drafts=[draft_item(d, reads.decider(who, d)) for d in drafts],
            )
        )

    async def _agents(self, request: Request) -> Response:
        described = await self._service.reads.describe_agents(caller(request))
        listed = AgentList(agents=[agent_view(*d) for d in described], models=self._service.reads.model_names)
        # What a page checks files against before it uploads them (the server checks them again).
        limits = self._service.reads.attachment_limits()
        attachments = {
            "max_bytes": limits.max_bytes,
            "max_count": limits.max_count,
            "mime_types": list(limits.mime_types),
        }
        return JSONResponse({**listed.model_dump(mode="json"), "attachments": attachments})
