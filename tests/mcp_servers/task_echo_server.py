"""A tiny task-capable MCP server, only to prove `tests.task_client` end to end (over stdio).

Tools: `echo(text)` (never a task) and `ask(question)` (a task that needs one form answer).

- 2025-11-25: a `tools/call` carrying `params.task` is answered by a middleware with a
  `CreateTaskResult` (the only way on SDK 2.3); `tasks/get`,
  `tasks/result` (sends `elicitation/create` with the related-task `_meta` on its own request),
  `tasks/cancel`, `tasks/list`; `notifications/tasks/status` on every change.
- 2026-07-28: the `io.modelcontextprotocol/tasks` extension: `ask` from a declaring client
  returns `{"resultType": "task", ...}`; `tasks/get` (with `inputRequests` / `result`),
  `tasks/update`, `tasks/cancel`; non-declaring clients get -32021.

Usage: python -m tests.mcp_servers.task_echo_server
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MCPServer, MethodBinding, require_client_extension
from mcp.server.session import ServerSession
from mcp.shared.message import ServerMessageMetadata

EXT = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"
LEGACY = "2025-11-25"
TERMINAL = {"completed", "failed", "cancelled"}
QUESTION_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Task:
    task_id: str
    era: str  # "legacy" | "modern"
    question: str
    ttl_ms: int | None
    session: ServerSession | None = None
    status: str = "working"
    status_message: str | None = None
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    input_key: str | None = None
    answer: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    changed: anyio.Event = field(default_factory=anyio.Event)
    answered: anyio.Event = field(default_factory=anyio.Event)

    def legacy_view(self) -> dict[str, Any]:
        view: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at,
            "ttl": self.ttl_ms,
            "pollInterval": 50,
        }
        if self.status_message is not None:
            view["statusMessage"] = self.status_message
        return view

    def modern_view(self) -> dict[str, Any]:
        view = self.legacy_view()
        view["ttlMs"] = view.pop("ttl")
        view["pollIntervalMs"] = view.pop("pollInterval")
        if self.status == "input_required" and self.input_key is not None:
            view["inputRequests"] = {
                self.input_key: {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": self.question, "requestedSchema": QUESTION_SCHEMA},
                }
            }
        if self.status == "completed":
            view["result"] = self.result
        return view


class Store:
    def __init__(self) -> None:
        self.tasks: dict[str, Task] = {}
        self.group: TaskGroup | None = None

    def create(self, era: str, question: str, ttl_ms: int | None, session: ServerSession | None) -> Task:
        task = Task(f"task-{uuid.uuid4().hex}", era, question, ttl_ms, session)
        self.tasks[task.task_id] = task
        assert self.group is not None
        self.group.start_soon(self.run, task)
        return task

    def get(self, task_id: str) -> Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown task {task_id}")
        return task

    async def set_status(self, task: Task, status: str, message: str | None = None) -> None:
        if task.status in TERMINAL:
            return
        task.status, task.status_message, task.updated_at = status, message, _now()
        task.changed.set()
        task.changed = anyio.Event()
        if task.era == "legacy" and task.session is not None:
            params = types.TaskStatusNotificationParams.model_validate(task.legacy_view())
            # The SDK's ServerNotification union leaves out the task types (types-only); it sends it as is.
            await task.session.send_notification(types.TaskStatusNotification(params=params))  # type: ignore[arg-type]

    async def run(self, task: Task) -> None:
        await anyio.sleep(0.05)
        task.input_key = f"{task.task_id}:answer"
        await self.set_status(task, "input_required", "waiting for an answer")
        await task.answered.wait()
        if task.status in TERMINAL:
            return
        await self.set_status(task, "working")
        answer = task.answer or {}
        if answer.get("action") == "accept":
            text = f"answer: {answer.get('content', {}).get('answer')}"
            task.result = {"content": [{"type": "text", "text": text}], "isError": False}
            await self.set_status(task, "completed")
        else:
            task.result = {"content": [{"type": "text", "text": "no answer"}], "isError": True}
            # A tool isError makes a 2025-11-25 task failed; the extension keeps it completed.
            await self.set_status(task, "failed" if task.era == "legacy" else "completed")

    def give_answer(self, task: Task, answer: dict[str, Any]) -> None:
        if task.answer is None and task.status == "input_required":
            task.answer = answer
            task.answered.set()


STORE = Store()


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class ListParams(types.RequestParams):
    cursor: str | None = None


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    caps = ctx.session.client_capabilities
    return bool(caps and caps.extensions and EXT in caps.extensions)


class Tasks(Extension):
    identifier = EXT

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get),
            MethodBinding("tasks/result", TaskIdParams, self.result, protocol_versions=frozenset({LEGACY})),
            MethodBinding("tasks/list", ListParams, self.list, protocol_versions=frozenset({LEGACY})),
            MethodBinding(
                "tasks/update", UpdateParams, self.update, protocol_versions=frozenset({"2026-07-28"})
            ),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel),
        ]

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        if ctx.protocol_version == LEGACY:
            return STORE.get(params.task_id).legacy_view()
        require_client_extension(ctx, EXT)
        return {"resultType": "complete", **STORE.get(params.task_id).modern_view()}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> dict[str, Any]:
        require_client_extension(ctx, EXT)
        task = STORE.get(params.task_id)
        if task.input_key in params.input_responses:
            STORE.give_answer(task, params.input_responses[task.input_key])
        return {"resultType": "complete"}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        legacy = ctx.protocol_version == LEGACY
        if not legacy:
            require_client_extension(ctx, EXT)
        task = STORE.get(params.task_id)
        if legacy and task.status in TERMINAL:
            raise MCPError(types.INVALID_PARAMS, f"task {task.task_id} is already {task.status}")
        await STORE.set_status(task, "cancelled", "cancelled by the client")
        task.answered.set()
        return task.legacy_view() if legacy else {"resultType": "complete"}

    async def list(self, ctx: ServerRequestContext[Any, Any], params: ListParams) -> dict[str, Any]:
        return {"tasks": [t.legacy_view() for t in STORE.tasks.values() if t.era == "legacy"]}

    async def result(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        task = STORE.get(params.task_id)
        while task.status not in TERMINAL:
            if task.status == "input_required" and task.answer is None:
                request = types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message=task.question,
                        requested_schema=QUESTION_SCHEMA,
                        _meta={RELATED: {"taskId": task.task_id}},
                    )
                )
                metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
                answer = await ctx.session.send_request(request, types.ElicitResult, metadata=metadata)
                STORE.give_answer(task, answer.model_dump(by_alias=True, mode="json", exclude_none=True))
            await task.changed.wait()
        if task.status == "cancelled":
            raise MCPError(types.INVALID_PARAMS, f"task {task.task_id} was cancelled")
        return {**(task.result or {}), "_meta": {RELATED: {"taskId": task.task_id}}}

    async def intercept_tool_call(
        self, params: types.CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if params.name != "ask" or ctx.protocol_version == LEGACY:
            return await call_next(ctx)
        if not _declared(ctx):
            require_client_extension(ctx, EXT)  # `ask` cannot run without tasks: -32021
        question = str((params.arguments or {}).get("question", "?"))
        task = STORE.create("modern", question, 60_000, None)
        return {"resultType": "task", **task.modern_view()}


async def legacy_task_calls(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Answer a task-augmented 2025-11-25 `tools/call` with a `CreateTaskResult`; advertise tasks."""
    params = ctx.params or {}
    if ctx.method == "tools/call" and ctx.protocol_version == LEGACY and params.get("task") is not None:
        if params.get("name") != "ask":
            raise MCPError(types.METHOD_NOT_FOUND, f"{params.get('name')} does not support tasks")
        requested = params["task"].get("ttl")
        ttl = min(requested, 60_000) if isinstance(requested, int) else 60_000
        question = str((params.get("arguments") or {}).get("question", "?"))
        task = STORE.create("legacy", question, ttl, ctx.session)
        return {
            "task": task.legacy_view(),
            "_meta": {"io.modelcontextprotocol/model-immediate-response": "started"},
        }
    result = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(result, dict) and result.get("protocolVersion") == LEGACY:
        capabilities = result.setdefault("capabilities", {})
        capabilities["tasks"] = {"cancel": {}, "list": {}, "requests": {"tools": {"call": {}}}}
    return result


@asynccontextmanager
async def lifespan(server: MCPServer[Any]) -> AsyncIterator[dict[str, Any]]:
    async with anyio.create_task_group() as group:
        STORE.group = group
        yield {}
        group.cancel_scope.cancel()


def build() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "task-echo", version="1.0", extensions=[Tasks()], middleware=[legacy_task_calls], lifespan=lifespan
    )

    @server.tool(structured_output=False)
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool(structured_output=False)
    async def ask(question: str) -> str:
        """Ask the user a question (as a task)."""
        raise MCPError(types.INVALID_REQUEST, "ask must be called as a task")

    return server


if __name__ == "__main__":
    build().run("stdio")
