"""Calling a downstream tool as an MCP task, on an open SDK client: 2025-11-25 core tasks (the
client asks for a task) and the 2026-07-28 extension (the server decides; parley declares it).

The SDK ships the task types but no client for them: its typed `tools/call` rejects a task
answer, so the task-augmented call goes out below the typed layer (the same stamping of
headers the typed path does, then the raw send). `tasks/*` go through the typed path; the SDK
does not validate their results, so they come back as sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.dispatcher import CallOptions
from mcp.types import (
    CallToolResult,
    CancelTaskRequest,
    CancelTaskRequestParams,
    GetTaskPayloadRequest,
    GetTaskPayloadRequestParams,
    GetTaskRequest,
    GetTaskRequestParams,
    Request,
    RequestParams,
    Result,
)
from pydantic import ConfigDict, RootModel

# A downstream task is an MCP task: its statuses are the ones parley serves its own tasks with.
from parley.core.states import TERMINAL_TASK_STATUSES
from parley.sdk_compat import send_raw_request

CORE_TASKS_VERSION = "2025-11-25"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"


class _Raw(RootModel[dict[str, Any]]):
    """A result kept as the dict it arrived as."""


@dataclass(frozen=True, slots=True)
class RemoteTask:
    task_id: str
    status: str
    status_message: str | None
    poll_interval_s: float | None
    ttl_ms: int | None

    @classmethod
    def from_wire(cls, task: dict[str, Any], modern: bool = False) -> RemoteTask:
        """A Task as 2025-11-25 spells it (`pollInterval`, `ttl`), or the 2026-07-28 extension
        (`pollIntervalMs`, `ttlMs`)."""
        interval = task.get("pollIntervalMs" if modern else "pollInterval")
        ttl = task.get("ttlMs" if modern else "ttl")
        return cls(
            task_id=str(task["taskId"]),
            status=str(task.get("status")),
            status_message=task.get("statusMessage"),
            poll_interval_s=interval / 1000 if isinstance(interval, int | float) and interval > 0 else None,
            ttl_ms=ttl if isinstance(ttl, int) else None,
        )

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_TASK_STATUSES


def speaks_core_tasks(client: Client) -> bool:
    """Whether the server can take task-augmented tool calls in the 2025-11-25 way."""
    caps = client.server_capabilities
    tasks = getattr(caps, "tasks", None) if caps is not None else None
    requests = getattr(tasks, "requests", None)
    tools = getattr(requests, "tools", None)
    return client.protocol_version == CORE_TASKS_VERSION and getattr(tools, "call", None) is not None


async def start_task(
    client: Client, tool: str, arguments: dict[str, Any], ttl_ms: int, meta: dict[str, Any], timeout_s: float
) -> RemoteTask:
    """`tools/call` with `task`; the server answers at once with the task it created."""
    params = {"name": tool, "arguments": arguments, "task": {"ttl": ttl_ms}, "_meta": meta}
    opts: CallOptions = {"timeout": timeout_s}
    # Below the typed layer: the SDK has no client side for task-augmented calls.
    raw = await send_raw_request(client.session, "tools/call", params, opts)
    task = raw.get("task") if isinstance(raw, dict) else None
    if not isinstance(task, dict) or not task.get("taskId"):
        raise ValueError(f"the server answered a task-augmented call without a task: {str(raw)[:300]}")
    return RemoteTask.from_wire(task)


async def get_task(client: Client, task_id: str, timeout_s: float) -> RemoteTask:
    request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    raw = await client.session.send_request(request, _Raw, request_read_timeout_seconds=timeout_s)
    return RemoteTask.from_wire(raw.root)


async def task_result(client: Client, task_id: str, timeout_s: float | None) -> CallToolResult:
    """`tasks/result`: blocks until the task ends (the server may ask for input meanwhile)."""
    request = GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task_id))
    raw = await client.session.send_request(request, _Raw, request_read_timeout_seconds=timeout_s)
    return CallToolResult.model_validate(raw.root)


async def cancel_task(client: Client, task_id: str, timeout_s: float) -> None:
    request = CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id))
    await client.session.send_request(request, _Raw, request_read_timeout_seconds=timeout_s)


# ---------------------------------------------------------------------- 2026-07-28 extension

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


class TaskHandle(Result):
    """A 2026-07-28 server's answer to a tool call that it runs as a task (`resultType: "task"`)."""

    model_config = ConfigDict(extra="allow")

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    ttl_ms: int | None = None

    def as_remote_task(self) -> RemoteTask:
        interval = self.poll_interval_ms
        return RemoteTask(
            task_id=self.task_id,
            status=self.status,
            status_message=self.status_message,
            poll_interval_s=interval / 1000 if interval else None,
            ttl_ms=self.ttl_ms,
        )


async def _not_resolved_here(handle: TaskHandle, context: ClaimContext) -> CallToolResult:
    # parley never lets the SDK poll a task in memory: it stores the handle and polls on timers.
    raise RuntimeError("downstream tasks are polled by parley's driver, not inside the call")


class TasksClientExtension(ClientExtension):
    """Declares the tasks extension to 2026-07-28 servers and accepts their task handles."""

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=_not_resolved_here)]


class _TaskIdParams(RequestParams):
    task_id: str


class _UpdateParams(RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class _GetTask(Request[_TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskIdParams
    name_param = "taskId"  # Mcp-Name: <taskId>, so a load balancer finds the replica with the task


class _UpdateTask(Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: _UpdateParams
    name_param = "taskId"


class _CancelTask(Request[_TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: _TaskIdParams
    name_param = "taskId"


async def get_task_modern(client: Client, task_id: str, timeout_s: float) -> dict[str, Any]:
    """The task with its status-specific fields: `inputRequests`, `result` or `error`."""
    raw = await client.session.send_request(
        _GetTask(params=_TaskIdParams(task_id=task_id)), _Raw, request_read_timeout_seconds=timeout_s
    )
    if not raw.root.get("taskId") or not raw.root.get("status"):
        raise ValueError(f"tasks/get answered without a task: {str(raw.root)[:300]}")
    return raw.root


async def update_task_modern(client: Client, task_id: str, answers: dict[str, Any], timeout_s: float) -> None:
    request = _UpdateTask(params=_UpdateParams(task_id=task_id, input_responses=answers))
    await client.session.send_request(request, _Raw, request_read_timeout_seconds=timeout_s)


async def cancel_task_modern(client: Client, task_id: str, timeout_s: float) -> None:
    request = _CancelTask(params=_TaskIdParams(task_id=task_id))
    await client.session.send_request(request, _Raw, request_read_timeout_seconds=timeout_s)
