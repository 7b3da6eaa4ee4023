"""MCP tasks on the wire, in both protocol generations.

2025-11-25 (core tasks): the client adds `task` to a `tools/call`; we answer with a task at once,
serve `tasks/get`, `tasks/result` (blocks until the end, asking the person through elicitation
tagged with the task), `tasks/cancel` and `tasks/list`, and push `notifications/tasks/status`.
The SDK rejects a task answer from a tool handler, so the call is taken over in a server
middleware: it runs the tool once without waiting (which queues the message, or applies the
decision), then stores a task that follows the turn.

2026-07-28 (extension `io.modelcontextprotocol/tasks`): a client that declares the extension on a
request gets a task handle instead of a blocking call whenever the turn has not already ended;
`tasks/get` inlines input requests or the result, `tasks/update` carries answers.

Either way a task is only a stored handle on a turn (see parley/runtime/mcp_tasks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import anyio
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.server import require_client_extension
from mcp.types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RequestParams,
    TaskStatusNotification,
    TaskStatusNotificationParams,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from parley.core.ids import QueuedMessageId, SessionId, TurnId
from parley.core.records import TaskRecord
from parley.core.states import AT_REST, OutcomeStatus
from parley.errors import InvalidArgument, RequestError
from parley.runtime.access import Principal
from parley.runtime.mcp_tasks import McpTaskService, TaskEnded, TaskNotFound
from parley.runtime.service import TurnOutcome
from parley.server.connections import connection_of
from parley.server.elicitation import (
    CREATING_TASK_META,
    RELATED_TASK_META,
    asking,
    can_elicit,
    input_requests,
    match_answers,
    takes_urls,
)
from parley.server.wire import iso

logger = logging.getLogger(__name__)

EXTENSION = "io.modelcontextprotocol/tasks"
CORE_TASKS_VERSION = "2025-11-25"
IMMEDIATE_RESPONSE_META = "io.modelcontextprotocol/model-immediate-response"
_BOTH = frozenset({CORE_TASKS_VERSION, *MODERN_PROTOCOL_VERSIONS})
_CORE = frozenset({CORE_TASKS_VERSION})
_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)

CallerOf = Callable[[Any], Principal]


class TaskIdParams(RequestParams):
    task_id: str = Field(min_length=1, max_length=200)


class ListTasksParams(RequestParams):
    cursor: str | None = Field(None, max_length=500)


class UpdateTaskParams(RequestParams):
    task_id: str = Field(min_length=1, max_length=200)
    input_responses: dict[str, Any]


def _declares_extension(ctx: ServerRequestContext[Any, Any]) -> bool:
    caps = ctx.session.client_capabilities
    return bool(caps is not None and caps.extensions and EXTENSION in caps.extensions)


def _invalid(exc: RequestError) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=str(exc))


def core_task(task: TaskRecord) -> dict[str, Any]:
    """A Task as 2025-11-25 spells it."""
    view: dict[str, Any] = {
        "taskId": task.id,
        "status": task.status,
        "createdAt": iso(task.created_at),
        "lastUpdatedAt": iso(task.updated_at),
        "ttl": task.ttl_ms,
        "pollInterval": task.poll_interval_ms,
    }
    if task.status_message:
        view["statusMessage"] = task.status_message
    return view


def modern_task(task: TaskRecord) -> dict[str, Any]:
    """A Task as the 2026-07-28 extension spells it."""
    view = core_task(task)
    view["ttlMs"] = view.pop("ttl")
    view["pollIntervalMs"] = view.pop("pollInterval")
    return view


def _cancelled_result(task: TaskRecord) -> dict[str, Any]:
    text = (
        f"Task {task.id} was cancelled, and with it turn {task.turn_id or '(not started)'} of session "
        f"{task.session_id}. Call get_session to see what was done before."
    )
    return {"content": [{"type": "text", "text": text}], "isError": True}


class McpTaskGateway(Extension):
    """The extension (2026-07-28), the middleware (task-augmented calls of both generations) and
    the tasks/* methods. `task_tools` are the tools whose work is a turn (tools.py: TASK_TOOLS):
    they may run as tasks (approve and answer_question follow the turn they resume)."""

    identifier = EXTENSION

    def __init__(
        self,
        tasks: McpTaskService,
        caller_of: CallerOf,
        watchers: TaskGroup | None,
        task_tools: frozenset[str],
    ) -> None:
        self._tasks = tasks
        self._caller_of = caller_of
        self._watchers = watchers
        self._task_tools = task_tools
        self._watched = 0

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=_BOTH),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=_BOTH),
            MethodBinding("tasks/result", TaskIdParams, self._result, protocol_versions=_CORE),
            MethodBinding("tasks/list", ListTasksParams, self._list, protocol_versions=_CORE),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, protocol_versions=_MODERN),
        ]

    # ------------------------------------------------------------------ the middleware

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.request_id is not None:
            params = dict(ctx.params or {})
            core_task_asked = ctx.protocol_version == CORE_TASKS_VERSION and params.get("task") is not None
            if core_task_asked and params.get("name") not in self._task_tools:
                # Its execution.taskSupport is "forbidden": the spec's answer is method-not-found.
                raise MCPError(
                    code=METHOD_NOT_FOUND,
                    message=f"{params.get('name')} does not run as a task; call it without 'task' "
                    f"(these can: {', '.join(sorted(self._task_tools))})",
                )
            if params.get("name") in self._task_tools and isinstance(params.get("arguments", {}), Mapping):
                if core_task_asked:
                    if not isinstance(params.get("task"), Mapping):
                        raise MCPError(
                            code=INVALID_PARAMS, message="'task' must be an object such as {\"ttl\": 60000}"
                        )
                    return await self._create_core(ctx, call_next, params)
                modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
                # A retry of an input-required round finishes as a plain call.
                if modern and _declares_extension(ctx) and "requestState" not in params:
                    return await self._create_modern(ctx, call_next, params)
        result = await call_next(ctx)
        if isinstance(result, dict):
            self._advertise(ctx, result)
        return result

    def _advertise(self, ctx: ServerRequestContext[Any, Any], result: dict[str, Any]) -> None:
        """Core tasks are offered only to clients that negotiated 2025-11-25."""
        if ctx.method == "initialize" and result.get("protocolVersion") == CORE_TASKS_VERSION:
            result.setdefault("capabilities", {})["tasks"] = {
                "list": {},
                "cancel": {},
                "requests": {"tools": {"call": {}}},
            }
        elif ctx.method == "tools/list" and ctx.protocol_version == CORE_TASKS_VERSION:
            for tool in result.get("tools", []):
                support = "optional" if tool.get("name") in self._task_tools else "forbidden"
                tool["execution"] = {"taskSupport": support}

    async def _start(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, params: dict[str, Any]
    ) -> dict[str, Any]:
        """Run the tool once without waiting and without asking anybody: it queues the message
        (or applies the decision) and says which turn will carry the work."""
        arguments = {**params.get("arguments", {}), "wait_seconds": 0}
        inner = {k: v for k, v in params.items() if k != "task"}
        inner["arguments"] = arguments
        inner["_meta"] = {**(params.get("_meta") or {}), CREATING_TASK_META: True}
        meta: dict[str, Any] = {**(ctx.meta or {}), CREATING_TASK_META: True}
        result = await call_next(replace(ctx, params=inner, meta=meta))  # type: ignore[arg-type]
        return dict(result) if isinstance(result, Mapping) else {}

    async def _create_core(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, params: dict[str, Any]
    ) -> dict[str, Any]:
        owner = self._caller_of(ctx)
        requested = params["task"].get("ttl")
        if requested is not None and (
            isinstance(requested, bool) or not isinstance(requested, int) or requested < 1
        ):
            raise MCPError(
                code=INVALID_PARAMS,
                message="'task.ttl' must be a whole number of milliseconds, 1 or more (or left out for the default)",
            )
        ttl_ms = self._tasks.ttl_ms(requested)
        tool = str(params["name"])
        result = await self._start(ctx, call_next, params)
        structured = result.get("structuredContent")
        if result.get("isError") or not isinstance(structured, Mapping):
            task = await self._tasks.create_ended(owner, CORE_TASKS_VERSION, tool, "failed", result, ttl_ms)
        elif structured.get("status") in AT_REST and not structured.get("turn_id"):
            task = await self._tasks.create_ended(
                owner, CORE_TASKS_VERSION, tool, "completed", result, ttl_ms
            )
        else:
            state = await self._tasks.create(owner, CORE_TASKS_VERSION, tool, _outcome_of(structured), ttl_ms)
            task = state.task
        self._watch(ctx, owner, task)
        return {
            "task": core_task(task),
            "_meta": {
                IMMEDIATE_RESPONSE_META: (
                    f"parley is working on this as task {task.id}"
                    + (f" in session {task.session_id}" if task.session_id else "")
                    + "; its result arrives when the turn ends."
                )
            },
        }

    async def _create_modern(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, params: dict[str, Any]
    ) -> dict[str, Any]:
        owner = self._caller_of(ctx)
        tool = str(params["name"])
        result = await self._start(ctx, call_next, params)
        structured = result.get("structuredContent")
        if (
            result.get("isError")
            or not isinstance(structured, Mapping)
            or structured.get("status") in AT_REST
        ):
            # Refused, or already over: the plain result says it all.
            return result
        state = await self._tasks.create(
            owner, EXTENSION, tool, _outcome_of(structured), self._tasks.ttl_ms(None)
        )
        return {"resultType": "task", **modern_task(state.task)}

    def _watch(self, ctx: ServerRequestContext[Any, Any], owner: Principal, task: TaskRecord) -> None:
        """Push the task's status changes to its client while the connection lasts (bounded:
        beyond `max_watched` tasks per process, clients only poll)."""
        if self._watchers is None or task.is_terminal or self._watched >= self._tasks.settings.max_watched:
            return
        session = ctx.session
        scopes = _watch_scopes(session)

        async def push(changed: TaskRecord) -> None:
            notification = TaskStatusNotification(
                params=TaskStatusNotificationParams.model_validate(core_task(changed))
            )
            # The SDK's typed union leaves out 2025-11-25's task notification (it ships types only).
            await session.send_notification(notification)  # type: ignore[arg-type]

        async def watch() -> None:
            self._watched += 1
            with anyio.CancelScope() as scope:
                scopes.add(scope)
                try:
                    await self._tasks.follow(owner, task.id, push)
                except Exception as exc:
                    # The connection broke, or the task expired: the client polls (or not) from here.
                    logger.debug("no more status notifications for %s: %s", task.id, type(exc).__name__)
                finally:
                    scopes.discard(scope)
                    self._watched -= 1

        self._watchers.start_soon(watch)

    # ------------------------------------------------------------------ tasks/* methods

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if modern:
            require_client_extension(ctx, EXTENSION)
        try:
            state = await self._tasks.get(self._caller_of(ctx), params.task_id)
        except TaskNotFound as exc:
            raise _invalid(exc) from None
        task = state.task
        if not modern:
            return core_task(task)
        view = modern_task(task)
        if task.status == "input_required":
            view["inputRequests"] = {
                key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
                for key, request in input_requests(state.pending, takes_urls(ctx.session)).items()
            }
        elif task.status == "completed":
            view["result"] = task.result or {"content": []}
        elif task.status == "failed":
            view["error"] = {"code": -32603, "message": task.status_message or "The task failed."}
        return {"resultType": "complete", **view}

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        owner = self._caller_of(ctx)
        ask = asking(ctx.session, ctx.request_id, params.task_id) if can_elicit(ctx.session) else None
        try:
            task = await self._tasks.until_ended(owner, params.task_id, ask)
        except TaskNotFound as exc:
            raise _invalid(exc) from None
        result = dict(task.result) if task.result is not None else _cancelled_result(task)
        result["_meta"] = {**(result.get("_meta") or {}), RELATED_TASK_META: {"taskId": task.id}}
        return result

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if modern:
            require_client_extension(ctx, EXTENSION)
        try:
            task = await self._tasks.cancel(self._caller_of(ctx), params.task_id)
        except TaskNotFound as exc:
            raise _invalid(exc) from None
        except TaskEnded as exc:
            if modern:
                return {"resultType": "complete"}  # cooperative: the ack says nothing about the outcome
            raise _invalid(exc) from None
        return {"resultType": "complete"} if modern else core_task(task)

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: ListTasksParams) -> dict[str, Any]:
        try:
            tasks, next_cursor = await self._tasks.list_page(self._caller_of(ctx), params.cursor)
        except InvalidArgument as exc:
            raise _invalid(exc) from None
        page: dict[str, Any] = {"tasks": [core_task(t) for t in tasks]}
        if next_cursor is not None:
            page["nextCursor"] = next_cursor
        return page

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        require_client_extension(ctx, EXTENSION)
        responses = params.input_responses
        try:
            await self._tasks.answer(
                self._caller_of(ctx), params.task_id, lambda pending: match_answers(responses, pending)
            )
        except RequestError as exc:
            # An unknown task, or a caller whose answers the agent does not take (approvers: ...).
            raise _invalid(exc) from None
        return {"resultType": "complete"}


_WATCH_SCOPES = "dev.parley/task-watchers"


def _watch_scopes(session: Any) -> set[anyio.CancelScope]:
    """The cancel scopes of the watchers pushing to this connection, cancelled when it closes:
    a watcher must not outlive its client (nor hold a max_watched slot for it)."""
    connection = connection_of(session)
    if connection is None:
        return set()
    scopes: set[anyio.CancelScope] | None = connection.state.get(_WATCH_SCOPES)
    if scopes is None:
        scopes = set()
        connection.state[_WATCH_SCOPES] = scopes

        def stop_all() -> None:
            for scope in list(scopes):
                scope.cancel()

        connection.exit_stack.callback(stop_all)
    return scopes


def _outcome_of(structured: Mapping[str, Any]) -> TurnOutcome:
    """The handle a tool result gives on its turn (our own structured content)."""
    queued = structured.get("queued_message_id")
    turn = structured.get("turn_id")
    return TurnOutcome(
        session_id=SessionId(str(structured.get("session_id"))),
        turn_id=TurnId(turn) if turn else None,
        # Our own structured content: its status is one of the outcome statuses.
        status=cast(OutcomeStatus, structured.get("status")),
        queued_message_id=QueuedMessageId(queued) if queued else None,
    )
