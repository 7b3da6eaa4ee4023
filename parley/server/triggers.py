"""`POST /v1/triggers/{name}`: a configured trigger starts a session of its agent, owned by its
owner, with the request's JSON as the first message or as a task's input (docs/webhooks.md#triggers).

A signed trigger's route is the one place a body is read before its caller is known: the bearer
gate lets exactly the configured signed paths through, and the body is read at most to the
trigger's `max_body_bytes`, within a short deadline, under the per-address cap
(server/http.py). A repeated delivery id finds the session the first delivery started."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parley.config import TriggerConfig, secret_from_env
from parley.core.records import SessionRecord
from parley.core.scopes import USE
from parley.errors import InvalidArgument
from parley.runtime.access import Principal
from parley.runtime.service import SessionService
from parley.runtime.service.requests import StartRequest, Waiting
from parley.server.auth_gate import TRIGGERS_PREFIX
from parley.server.trigger_auth import (
    SignedRequest,
    TriggerRefused,
    check_bearer,
    check_github,
    check_standard_webhooks,
)
from parley.server.v1_common import error_response, problem

logger = logging.getLogger(__name__)

TRIGGER_PREFIX = TRIGGERS_PREFIX
# The optional delivery id of a bearer-authenticated request.
IDEMPOTENCY_HEADER = "idempotency-key"


@dataclass(frozen=True, slots=True)
class TriggerRoutes:
    """The configured triggers, as the HTTP app and the route need them."""

    triggers: Mapping[str, TriggerConfig] = field(default_factory=dict)
    # The session an owner started with a client_message_id (the store's), for repeated deliveries.
    find_started: Callable[[str, str], Awaitable[SessionRecord | None]] | None = None

    def path(self, name: str) -> str:
        return TRIGGER_PREFIX + name

    @property
    def signed_paths(self) -> frozenset[str]:
        """The paths the bearer gate lets through: their signature is checked by the route."""
        return frozenset(self.path(n) for n, t in self.triggers.items() if t.auth != "bearer")

    @property
    def body_limits(self) -> dict[str, int]:
        return {self.path(n): t.max_body_bytes for n, t in self.triggers.items()}


def session_key(name: str, delivery_id: str) -> str:
    """The client_message_id a delivery starts its session with: unique per owner in the
    database, so a repeated delivery id finds the session instead of starting one."""
    return f"trigger:{name}:{hashlib.sha256(delivery_id.encode()).hexdigest()[:40]}"


class TriggerEndpoint:
    def __init__(self, service: SessionService, routes: TriggerRoutes) -> None:
        self._service = service
        self._triggers = dict(routes.triggers)
        self._find_started = routes.find_started

    def route(self) -> Route:
        return Route(TRIGGER_PREFIX + "{name}", self.endpoint, methods=["POST"])

    async def endpoint(self, request: Request) -> Response:
        name = request.path_params["name"]
        trigger = self._triggers.get(name)
        if trigger is None:
            return problem(
                404,
                "unknown-trigger",
                f"no trigger named {name[:64]!r} is configured (triggers: in parley.yaml)",
            )
        try:
            body = await request.body()
            delivery = self._authenticate(trigger, request, body)
            return await self._start(name, trigger, body, delivery)
        except TriggerRefused as refused:
            logger.info("refused a request to trigger %s: %s", name, refused.detail)
            return problem(refused.status, refused.kind, refused.detail)
        except InvalidArgument as exc:
            if exc.field in ("inputs", "message"):
                return problem(422, "unprocessable-input", str(exc), field=exc.field)
            return error_response(exc)
        except Exception as exc:
            return error_response(exc)

    def _authenticate(self, trigger: TriggerConfig, request: Request, body: bytes) -> str | None:
        if trigger.auth == "bearer":
            token = get_access_token()
            check_bearer(trigger, frozenset(token.scopes) if token is not None else None)
            return request.headers.get(IDEMPOTENCY_HEADER) or request.headers.get("webhook-id")
        secret = secret_from_env(trigger.secret_env)
        if not secret:
            raise TriggerRefused(
                503,
                "trigger-unavailable",
                f"the trigger's secret ({trigger.secret_env}) is not set on this server",
            )
        signed = SignedRequest(request.headers, body, time.time())
        if trigger.auth == "github":
            return check_github(secret, signed)
        return check_standard_webhooks(trigger, secret, signed)

    async def _start(self, name: str, trigger: TriggerConfig, body: bytes, delivery: str | None) -> Response:
        document = _json(body)
        owner = Principal(
            id=trigger.owner, scopes=frozenset({USE}), client=f"trigger:{name}", authenticated=True
        )
        key = session_key(name, delivery) if delivery else None
        if key is not None and self._find_started is not None:
            existing = await self._find_started(owner.id, key)
            if existing is not None:
                return _answer(name, existing.id, delivery, duplicate=True)
        if trigger.body_as == "input":
            if not isinstance(document, dict):
                raise InvalidArgument("inputs", "the body must be a JSON object: the task's input")
            request = StartRequest(agent=trigger.agent, kind="task", inputs=document, client_message_id=key)
        else:
            text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
            request = StartRequest(agent=trigger.agent, message=text, client_message_id=key)
        outcome = await self._service.messages.start_session(owner, request, Waiting(seconds=0))
        return _answer(name, outcome.session_id, delivery, duplicate=False)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise TriggerRefused(400, "bad-json", f"the body is not JSON ({exc}); send a JSON document") from None


def _answer(name: str, session_id: str, delivery: str | None, *, duplicate: bool) -> JSONResponse:
    body = {"trigger": name, "session_id": session_id, "delivery_id": delivery, "duplicate": duplicate}
    return JSONResponse(body, status_code=200 if duplicate else 202)
