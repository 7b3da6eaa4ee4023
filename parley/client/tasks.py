"""MCP tasks for the client: the 2026-07-28 extension `io.modelcontextprotocol/tasks`.

With the extension declared, parley answers start_session, send_message, approve and
answer_question with a task handle whenever the turn has not already ended; the client then polls
`tasks/get` until the task completes (its result is the turn outcome) or needs input. Everything
here is public SDK API: a `ClientExtension` declares the extension and claims `resultType: "task"`
(the client asks for the handle with `allow_claimed=True` and follows it itself), and the three
methods go through `ClientSession.send_request`.

The 2025-11-25 core tasks are left out: the SDK's client can only add `task` to a tools/call
through its private dispatcher, and this client always speaks 2026-07-28 to parley.
"""

from __future__ import annotations

from typing import Any, Literal

import mcp.types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from pydantic import BaseModel, ConfigDict, Field, RootModel
from pydantic.alias_generators import to_camel

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


# The statuses a task ends with: TERMINAL_TASK_STATUSES of parley/core/states.py, mirrored (the
# client imports nothing of the server's side of parley; tests/test_states.py checks they agree).
TERMINAL_TASK_STATUSES = frozenset({"completed", "failed", "cancelled"})


class TaskHandle(types.Result):
    """What tools/call answers when the server runs the call as a task."""

    model_config = ConfigDict(extra="allow")

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TaskState(BaseModel):
    """A task as tasks/get reads it."""

    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)

    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_TASK_STATUSES


class _TaskIdParams(types.RequestParams):
    task_id: str


class _UpdateParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class _GetTask(types.Request[_TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskIdParams
    name_param = "taskId"  # sent as the Mcp-Name header over HTTP


class _UpdateTask(types.Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: _UpdateParams
    name_param = "taskId"


class _CancelTask(types.Request[_TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: _TaskIdParams
    name_param = "taskId"


class _AnyResult(RootModel[dict[str, Any]]):
    """tasks/* results are in none of the SDK's tables: read them as the dict they are."""


async def _unclaimed(handle: TaskHandle, context: ClaimContext) -> types.CallToolResult:
    raise RuntimeError("parley.client follows its tasks itself (call with allow_claimed=True)")


class TasksExtension(ClientExtension):
    """Declares the tasks extension on every request and reads `resultType: "task"` as a TaskHandle."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=_unclaimed)]


async def get_task(session: ClientSession, task_id: str, timeout_s: float) -> TaskState:
    raw = await session.send_request(
        _GetTask(params=_TaskIdParams(task_id=task_id)), _AnyResult, request_read_timeout_seconds=timeout_s
    )
    return TaskState.model_validate(raw.root)


async def update_task(
    session: ClientSession, task_id: str, responses: dict[str, Any], timeout_s: float
) -> None:
    await session.send_request(
        _UpdateTask(params=_UpdateParams(task_id=task_id, input_responses=responses)),
        _AnyResult,
        request_read_timeout_seconds=timeout_s,
    )


async def cancel_task(session: ClientSession, task_id: str, timeout_s: float) -> None:
    await session.send_request(
        _CancelTask(params=_TaskIdParams(task_id=task_id)), _AnyResult, request_read_timeout_seconds=timeout_s
    )


def offered(capabilities: types.ServerCapabilities) -> bool:
    """Whether the server offers the tasks extension (its discover result lists it)."""
    extensions = getattr(capabilities, "extensions", None) or {}
    return TASKS_EXTENSION in extensions
