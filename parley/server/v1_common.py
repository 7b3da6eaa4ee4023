"""What every /v1 route shares: who the caller is (the same bearer gate and principals as /mcp),
errors as JSON problem details (RFC 9457) mapped in one place, and reading JSON bodies."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.server.auth.middleware.auth_context import get_access_token
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parley.config import HttpConfig
from parley.errors import (
    ApproversOnly,
    AttachmentNotFound,
    DecisionConflict,
    HumanApprovalOnly,
    InterruptNotFound,
    InvalidArgument,
    NotAdmin,
    OwnerOnly,
    PlanRefused,
    RateLimited,
    RequestError,
    SessionBusy,
    SessionClosed,
    SessionLimitReached,
    SessionNotFound,
    StorageUnavailable,
    UnknownAgent,
)
from parley.runtime.access import LOCAL_PRINCIPAL, Principal
from parley.runtime.service import SessionService
from parley.runtime.session_events import SessionEvents
from parley.runtime.tracing import request_ended, request_span
from parley.server.auth_tokens import principal_of

if TYPE_CHECKING:
    from parley.server.oauth_routes import OAuthRoutes
    from parley.server.triggers import TriggerRoutes

logger = logging.getLogger(__name__)

PROBLEM_TYPE = "application/problem+json"
# A stream position as this server writes it (a bigint fits 18 digits whatever they are).
_POSITION = re.compile(r"[0-9]{1,18}")
# Longest User-Agent kept as the audit's client name.
CLIENT_CHARS = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSettings:
    """Timings of the event streams (http.stream_* in parley.yaml) and the chat's default agent."""

    heartbeat_s: float
    slow_client_s: float
    # The agent of /v1/chat when the route names none.
    chat_agent: str = "demo"

    @classmethod
    def of(cls, config: HttpConfig) -> StreamSettings:
        return cls(
            heartbeat_s=config.stream_heartbeat_s,
            slow_client_s=config.stream_slow_client_s,
            chat_agent=config.chat_agent,
        )


@dataclass(frozen=True, slots=True)
class V1Context:
    """What the /v1 routes are built from."""

    service: SessionService
    events: SessionEvents
    streams: StreamSettings
    # POST /v1/triggers/{name} (server/triggers.py); None: no triggers configured.
    triggers: TriggerRoutes | None = None
    # http.base_path: the prefix of the paths parley hands out (a history's attachment URLs).
    base_path: str = ""
    # Connect links and the OAuth callback (server/oauth_routes.py); None: no server has auth.
    oauth: OAuthRoutes | None = None


def caller(request: Request) -> Principal:
    """The principal of a /v1 request: from its bearer token (the gate in front of every route
    checked it), else the local user (`auth: none`); its User-Agent names the client for the audit."""
    token = get_access_token()
    who = principal_of(token) if token is not None else LOCAL_PRINCIPAL
    agent = request.headers.get("user-agent")
    return who.with_client(agent[:CLIENT_CHARS] if agent else None)


class BadRequest(RequestError):
    """A /v1 request that is not what the endpoint takes (its body, a parameter)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)


class NotJson(RequestError):
    """A /v1 request body sent as something other than JSON."""

    def __init__(self, content_type: str | None) -> None:
        sent = f"Content-Type {content_type[:80]!r}" if content_type else "no Content-Type"
        super().__init__(f"/v1 takes JSON bodies only: send Content-Type: application/json (got {sent})")


# Most specific first: the status each error answers with.
_STATUS: tuple[tuple[type[Exception], int, str], ...] = (
    (SessionNotFound, 404, "session-not-found"),
    (InterruptNotFound, 404, "interrupt-not-found"),
    (AttachmentNotFound, 404, "attachment-not-found"),
    (UnknownAgent, 404, "unknown-agent"),
    (HumanApprovalOnly, 403, "human-approval-only"),
    (NotAdmin, 403, "not-admin"),
    (ApproversOnly, 403, "approvers-only"),
    (OwnerOnly, 403, "owner-only"),
    (SessionClosed, 409, "session-closed"),
    (SessionLimitReached, 409, "session-limit-reached"),
    (SessionBusy, 409, "session-busy"),
    (DecisionConflict, 409, "decision-conflict"),
    (PlanRefused, 409, "plan-refused"),
    (RateLimited, 429, "rate-limited"),
    (InvalidArgument, 400, "invalid-argument"),
    (NotJson, 415, "unsupported-media-type"),
    (BadRequest, 400, "bad-request"),
    (RequestError, 400, "request-error"),
)


def problem(status: int, kind: str, detail: str, **extra: Any) -> JSONResponse:
    """A problem-details response (RFC 9457)."""
    body = {"type": f"urn:parley:problem:{kind}", "title": kind.replace("-", " "), "status": status}
    body |= {"detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_TYPE)


def error_response(exc: Exception) -> Response:
    """The one mapping of our errors to HTTP answers on /v1."""
    if isinstance(exc, StorageUnavailable):
        logger.warning("a /v1 request failed: the database is %s", exc.condition)
        return problem(503, "storage-unavailable", str(exc))
    for kind, status, name in _STATUS:
        if isinstance(exc, kind):
            extra: dict[str, Any] = {}
            if isinstance(exc, InvalidArgument):
                extra["field"] = exc.field
            if isinstance(exc, PlanRefused):
                extra |= {"reason": exc.reason, "revision": exc.revision}
            response = problem(status, name, str(exc), **extra)
            if isinstance(exc, RateLimited) and exc.retry_after_s is not None:
                response.headers["retry-after"] = str(max(1, round(exc.retry_after_s)))
            return response
    ref = uuid.uuid4().hex[:8]
    logger.error("a /v1 request failed (ref %s)", ref, exc_info=exc)
    return problem(500, "internal-error", f"parley hit an internal error (ref {ref}); try again.")


Endpoint = Callable[[Request], Awaitable[Response]]


def guarded(endpoint: Endpoint) -> Endpoint:
    """`endpoint` with our errors answered as problem details, in a span of the request (a child of
    the caller's `traceparent`: what the request queues joins the caller's trace)."""

    async def run(request: Request) -> Response:
        route = getattr(request.scope.get("route"), "path", None) or "/v1"
        with request_span(request.method, route, request.headers) as span:
            try:
                response = await endpoint(request)
            except Exception as exc:
                response = error_response(exc)
            request_ended(span, response.status_code)
            return response

    return run


def require_json(request: Request) -> None:
    """Refuse a body not sent as JSON. A page elsewhere may post text/plain or a form without a
    CORS preflight; JSON only means every cross-origin body is preflighted, and checked."""
    content_type = request.headers.get("content-type")
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json" and not (
        media_type.startswith("application/") and media_type.endswith("+json")
    ):
        raise NotJson(content_type)


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object (the body's size and deadline are checked before the app runs)."""
    raw = await request.body()
    if raw:
        require_json(request)
    try:
        body = json.loads(raw) if raw else None
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON ({exc}); send a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def event_position(request: Request) -> int | None:
    """Where a stream resumes: `Last-Event-ID` (what an EventSource sends on reconnecting), else
    `?after=`, else 0 (from the session's first event). `?after=latest` is None: from the events
    committed after the stream opens (a viewer that shows what happens from now on)."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if raw == "latest":
        return None
    # Plain ASCII digits only: int() would also take "1_000", " 3", "+3" and other scripts' digits,
    # positions this server never sends.
    if not _POSITION.fullmatch(raw):
        raise BadRequest(
            "Last-Event-ID / after must be an event number from this stream, plain digits 0-9 such as 42 "
            f"(or after=latest), got {raw[:40]!r}"
        )
    position = int(raw)
    return position
