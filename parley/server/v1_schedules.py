"""The schedule endpoints of /v1, for callers with parley:admin: the same service calls, checks
and results as the schedule tools (docs/schedules.md#v1)."""

from __future__ import annotations

from pydantic import ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parley.runtime.service import SessionService
from parley.server.arguments import argument_errors
from parley.server.json_text import check_unicode
from parley.server.schedule_tools import (
    CreateScheduleArguments,
    ScheduleChange,
    ScheduleList,
    request_of,
    schedule_item,
)
from parley.server.v1_common import BadRequest, V1Context, caller, guarded, json_body


class ScheduleBody(CreateScheduleArguments):
    """POST /v1/schedules: create_schedule's arguments, unknown fields refused."""

    model_config = ConfigDict(extra="forbid")


class ScheduleEndpoints:
    def __init__(self, ctx: V1Context) -> None:
        self._service: SessionService = ctx.service

    def routes(self) -> list[Route]:
        endpoints = [
            ("/v1/schedules", self._list, "GET"),
            ("/v1/schedules", self._create, "POST"),
            ("/v1/schedules/{name}/pause", self._pause, "POST"),
            ("/v1/schedules/{name}/resume", self._resume, "POST"),
            ("/v1/schedules/{name}", self._delete, "DELETE"),
        ]
        return [Route(path, guarded(endpoint), methods=[method]) for path, endpoint, method in endpoints]

    async def _list(self, request: Request) -> Response:
        views = await self._service.schedules.views(caller(request))
        listing = ScheduleList(schedules=[schedule_item(v.schedule, v) for v in views])
        return JSONResponse(listing.model_dump(mode="json"))

    async def _create(self, request: Request) -> Response:
        raw = await json_body(request)
        check_unicode(raw)
        try:
            body = ScheduleBody.model_validate(raw)
        except ValidationError as exc:
            raise BadRequest(argument_errors("POST /v1/schedules", exc)) from None
        made = await self._service.schedules.create(caller(request), request_of(body))
        return _change(made.name, "created", 201)

    async def _pause(self, request: Request) -> Response:
        name = request.path_params["name"]
        await self._service.schedules.set_paused(caller(request), name, True)
        return _change(name, "paused")

    async def _resume(self, request: Request) -> Response:
        name = request.path_params["name"]
        await self._service.schedules.set_paused(caller(request), name, False)
        return _change(name, "resumed")

    async def _delete(self, request: Request) -> Response:
        name = request.path_params["name"]
        await self._service.schedules.delete(caller(request), name)
        return _change(name, "deleted")


def _change(name: str, status: str, code: int = 200) -> JSONResponse:
    change = ScheduleChange.model_validate({"name": name, "status": status})
    return JSONResponse(change.model_dump(mode="json"), status_code=code)
