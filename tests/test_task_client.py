"""Self-test of tests/task_client.py: the schema checks on the specs' own examples, and both task
generations end to end against a tiny fixture server (tests/mcp_servers/task_echo_server.py) in this
process, in memory and over HTTP (over stdio, a process of its own: tests/test_e2e_task_client.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
import uvicorn
from mcp import MCPError

from parley.sdk_compat import InMemoryTransport  # the SDK's own in-memory pairing
from tests.support import eventually
from tests.task_client import (
    LEGACY,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    MODERN,
    RELATED_TASK_META,
    TASKS_EXTENSION,
    TaskRecorder,
    call_tool_as_task,
    call_tool_modern,
    cancel_task,
    cancel_task_modern,
    check,
    create_task,
    definitions,
    get_task,
    get_task_modern,
    is_terminal,
    list_tasks,
    poll_until,
    task_client,
    task_result,
    update_task,
)

pytestmark = pytest.mark.anyio

TASK_ID = "786512e2-9e0d-44bd-8f29-789f320fe840"

# --- Examples copied from the specifications (2025-11-25 basic/utilities/tasks, ext-tasks 2026-07-28) ---

LEGACY_TASK = {
    "taskId": TASK_ID,
    "status": "working",
    "statusMessage": "The operation is now in progress.",
    "createdAt": "2025-11-25T10:30:00Z",
    "lastUpdatedAt": "2025-11-25T10:40:00Z",
    "ttl": 60000,
    "pollInterval": 5000,
}
LEGACY_EXAMPLES = [
    ("CreateTaskResult", {"task": LEGACY_TASK}),
    ("GetTaskResult", {**LEGACY_TASK, "ttl": 30000}),
    (
        "GetTaskPayloadResult",
        {
            "content": [{"type": "text", "text": "Current weather in New York:\nTemperature: 72°F"}],
            "isError": False,
            "_meta": {RELATED_TASK_META: {"taskId": TASK_ID}},
        },
    ),
    (
        "TaskStatusNotification",
        {
            "jsonrpc": "2.0",
            "method": "notifications/tasks/status",
            "params": {**LEGACY_TASK, "status": "completed", "lastUpdatedAt": "2025-11-25T10:50:00Z"},
        },
    ),
    ("ListTasksResult", {"tasks": [LEGACY_TASK], "nextCursor": "next-page-cursor"}),
    ("CancelTaskResult", {**LEGACY_TASK, "status": "cancelled"}),
]

MODERN_TASK = {
    "taskId": TASK_ID,
    "status": "working",
    "createdAt": "2025-11-25T10:30:00Z",
    "lastUpdatedAt": "2025-11-25T10:50:00Z",
    "ttlMs": 3600000,
    "pollIntervalMs": 5000,
}
NAME_REQUEST = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Please enter your name.",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}
MODERN_EXAMPLES = [
    ("CreateTaskResult", {"resultType": "task", **MODERN_TASK}),
    ("GetTaskResult", {"resultType": "complete", **MODERN_TASK}),
    (
        "GetTaskResult",
        {
            "resultType": "complete",
            **MODERN_TASK,
            "status": "input_required",
            "inputRequests": {"name": NAME_REQUEST},
        },
    ),
    (
        "GetTaskResult",
        {
            "resultType": "complete",
            **MODERN_TASK,
            "status": "completed",
            "result": {"content": [{"type": "text", "text": "Hello, Luca!"}], "isError": False},
        },
    ),
    ("UpdateTaskResult", {"resultType": "complete"}),
    ("CancelTaskResult", {"resultType": "complete"}),
]


@pytest.mark.parametrize(("name", "message"), LEGACY_EXAMPLES, ids=[n for n, _ in LEGACY_EXAMPLES])
def test_2025_11_25_spec_examples_pass(name: str, message: dict[str, Any]) -> None:
    assert check(LEGACY, name, message) is message


@pytest.mark.parametrize(("name", "message"), MODERN_EXAMPLES, ids=[n for n, _ in MODERN_EXAMPLES])
def test_2026_07_28_spec_examples_pass(name: str, message: dict[str, Any]) -> None:
    assert check(MODERN, name, message) is message


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


BROKEN = [
    (
        LEGACY,
        "CreateTaskResult",
        {"task": _without(LEGACY_TASK, "taskId")},
        "'taskId' is a required property",
    ),
    (LEGACY, "GetTaskResult", {**LEGACY_TASK, "status": "done"}, "at /status"),
    (LEGACY, "GetTaskResult", _without(LEGACY_TASK, "ttl"), "'ttl' is a required property"),
    (LEGACY, "CreateTaskResult", LEGACY_TASK, "'task' is a required property"),  # not nested
    (MODERN, "CreateTaskResult", {"resultType": "complete", **MODERN_TASK}, "'task' was expected"),
    (MODERN, "CreateTaskResult", {"resultType": "task", **_without(MODERN_TASK, "taskId")}, "'taskId'"),
    (
        MODERN,
        "CreateTaskResult",
        {"resultType": "task", **_without(MODERN_TASK, "ttlMs"), "ttl": 1},
        "'ttlMs'",
    ),
    (MODERN, "GetTaskResult", {"resultType": "complete", **MODERN_TASK, "status": "done"}, "anyOf"),
    (
        MODERN,
        "GetTaskResult",
        {"resultType": "complete", **MODERN_TASK, "status": "input_required"},
        "'inputRequests' is a required property",
    ),
    (MODERN, "GetTaskResult", {**MODERN_TASK, "status": "completed"}, "'result' is a required property"),
    (MODERN, "UpdateTaskResult", {}, "'resultType' is a required property"),
]


@pytest.mark.parametrize(("generation", "name", "message", "reason"), BROKEN)
def test_broken_messages_fail_with_a_readable_reason(
    generation: str, name: str, message: dict[str, Any], reason: str
) -> None:
    with pytest.raises(AssertionError, match=f"not a valid {generation} {name}") as failure:
        check(generation, name, message)
    assert reason in str(failure.value)


def test_the_vendored_schemas_define_every_task_message() -> None:
    legacy = {"Task", "CreateTaskResult", "GetTaskResult", "GetTaskPayloadResult", "CancelTaskResult"}
    legacy |= {"ListTasksResult", "TaskStatusNotification", "ElicitRequest", "CallToolResult"}
    assert legacy <= definitions(LEGACY)
    modern = {"CreateTaskResult", "GetTaskResult", "DetailedTask", "UpdateTaskResult", "CancelTaskResult"}
    modern |= {"CallToolResult"}  # from the 2026 core schema
    assert modern <= definitions(MODERN)
    with pytest.raises(AssertionError, match="no definition 'Nope'"):
        check(LEGACY, "Nope", {})


async def test_poll_until_returns_the_first_match_and_reports_the_last_task_on_timeout() -> None:
    seen = iter(range(1000))

    async def get() -> dict[str, Any]:
        return {"n": next(seen)}

    assert await poll_until(get, lambda t: t["n"] >= 3, interval_s=0.001) == {"n": 3}
    with pytest.raises(AssertionError, match=r'last task seen: \{"n": \d+\}'):
        await poll_until(get, lambda t: False, deadline=0.05, interval_s=0.001)


# --- End to end against tests/mcp_servers/task_echo_server.py, in-process: in memory, and on HTTP ---


@pytest.fixture(params=["memory", "http"])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """What `task_client` connects to: a transport to the server in memory (what stdio carries,
    without the framing), or the URL of it served over HTTP."""
    from tests.mcp_servers.task_echo_server import build

    if request.param == "memory":
        yield InMemoryTransport(build())
        return
    app = build().streamable_http_app(streamable_http_path="/mcp")  # stateful, SSE: legacy back channel works
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    async with anyio.create_task_group() as group:
        group.start_soon(web.serve)

        async def started() -> bool:
            return web.started

        await eventually(started, "the HTTP fixture server to start")
        port = web.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/mcp"
        web.should_exit = True


async def _error_code(call: Any) -> int:
    with pytest.raises(MCPError) as failure:
        await call
    return failure.value.error.code


async def test_legacy_task_with_elicitation_on_tasks_result(target: Any) -> None:
    recorder = TaskRecorder(
        expect_related_task=True, answers=[{"action": "accept", "content": {"answer": "Ada"}}]
    )
    async with task_client(target, mode="legacy", recorder=recorder) as (client, _):
        assert client.protocol_version == LEGACY
        created = await create_task(client, "ask", {"question": "Your name?"}, ttl_ms=30_000)
        assert created["_meta"]["io.modelcontextprotocol/model-immediate-response"] == "started"
        task_id = created["task"]["taskId"]
        assert created["task"]["ttl"] == 30_000
        assert recorder.headers_of("tools/call")[-1]["mcp-protocol-version"] == LEGACY
        assert recorder.requests_of("tools/call")[-1]["params"]["task"] == {"ttl": 30_000}

        waiting = await poll_until(
            lambda: get_task(client, task_id), lambda t: t["status"] == "input_required"
        )
        assert waiting["statusMessage"] == "waiting for an answer"
        result = await task_result(client, task_id)
        assert result["content"][0]["text"] == "answer: Ada"
        assert result["_meta"][RELATED_TASK_META] == {"taskId": task_id}

        [asked] = recorder.elicitations_for(task_id)
        assert asked.params["message"] == "Your name?"
        assert (await get_task(client, task_id))["status"] == "completed"
        await recorder.wait_for(
            lambda r: any(s["status"] == "completed" for s in r.statuses_for(task_id)), "the completed status"
        )
        assert [s["status"] for s in recorder.statuses_for(task_id)] == [
            "input_required",
            "working",
            "completed",
        ]
        listed = await list_tasks(client)
        assert task_id in [t["taskId"] for t in listed["tasks"]]
        assert await _error_code(cancel_task(client, task_id)) == -32602  # terminal
        assert await _error_code(get_task(client, "task-unknown")) == -32602


async def test_legacy_cancel_and_a_declined_question(target: Any) -> None:
    recorder = TaskRecorder(expect_related_task=True)  # default answer: decline
    async with task_client(target, mode="legacy", recorder=recorder) as (client, _):
        first = await call_tool_as_task(client, "ask", {"question": "Stop?"})
        assert first["ttl"] == 60_000
        cancelled = await cancel_task(client, first["taskId"])
        assert cancelled["status"] == "cancelled"
        assert (await get_task(client, first["taskId"]))["status"] == "cancelled"

        second = await call_tool_as_task(client, "ask", {"question": "Declined?"})
        result = await task_result(client, second["taskId"])  # the recorder declines the question
        assert result["isError"] is True
        assert (await get_task(client, second["taskId"]))["status"] == "failed"
        assert recorder.asked[-1][1]["message"] == "Declined?"
        assert await _error_code(call_tool_as_task(client, "echo", {"text": "x"})) == -32601


async def test_modern_task_with_input_requests_and_tasks_update(target: Any) -> None:
    async with task_client(target) as (client, recorder):
        assert client.protocol_version == MODERN
        plain = await call_tool_modern(client, "echo", {"text": "hi"})
        assert plain["content"][0]["text"] == "hi"

        handle = await call_tool_modern(client, "ask", {"question": "Your name?"})
        assert handle["resultType"] == "task" and handle["status"] == "working"
        task_id = handle["taskId"]
        waiting = await poll_until(
            lambda: get_task_modern(client, task_id), lambda t: t["status"] == "input_required"
        )
        [(key, request)] = waiting["inputRequests"].items()
        assert request["params"]["message"] == "Your name?"
        ack = await update_task(client, task_id, {key: {"action": "accept", "content": {"answer": "Grace"}}})
        assert ack["resultType"] == "complete"
        done = await poll_until(lambda: get_task_modern(client, task_id), is_terminal)
        assert done["status"] == "completed"
        assert done["result"]["content"][0]["text"] == "answer: Grace"

        for method in ("tasks/get", "tasks/update"):
            headers = recorder.headers_of(method)[-1]
            assert headers["mcp-name"] == task_id and headers["mcp-method"] == method
            meta = recorder.requests_of(method)[-1]["params"]["_meta"]
            assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN
            assert TASKS_EXTENSION in meta["io.modelcontextprotocol/clientCapabilities"]["extensions"]

        assert await _error_code(get_task_modern(client, "task-unknown")) == -32602
        code = await _error_code(get_task_modern(client, task_id, declare_extension=False))
        assert code == MISSING_REQUIRED_CLIENT_CAPABILITY
        undeclared = recorder.requests_of("tasks/get")[-1]["params"]["_meta"]
        assert "extensions" not in undeclared["io.modelcontextprotocol/clientCapabilities"]


async def test_modern_client_call_tool_resolves_a_task_through_the_extension_claim(target: Any) -> None:
    recorder = TaskRecorder(answers=[{"action": "accept", "content": {"answer": "Hopper"}}])
    async with task_client(target, recorder=recorder) as (client, _):
        result = await client.call_tool("ask", {"question": "Surname?"})
        assert result.content[0].text == "answer: Hopper"  # type: ignore[union-attr]
        [(key, params)] = recorder.asked
        assert key.endswith(":answer") and params["message"] == "Surname?"

        handle = await call_tool_modern(client, "ask", {"question": "Cancel me"})
        assert (await cancel_task_modern(client, handle["taskId"]))["resultType"] == "complete"
        assert (await get_task_modern(client, handle["taskId"]))["status"] == "cancelled"


async def test_a_client_without_the_extension_gets_no_task_and_minus_32021(target: Any) -> None:
    async with task_client(target, declare_tasks=False) as (client, recorder):
        assert client.protocol_version == MODERN
        assert await _error_code(call_tool_modern(client, "ask", {"question": "?"})) == -32021
        assert await _error_code(get_task_modern(client, "task-any")) == -32021
        meta = recorder.requests_of("tasks/get")[-1]["params"]["_meta"]
        assert TASKS_EXTENSION not in (
            meta["io.modelcontextprotocol/clientCapabilities"].get("extensions") or {}
        )
