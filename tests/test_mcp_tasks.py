"""MCP tasks for start_session / send_message / approve / answer_question, against parley in the
test's process (the composition root of `parley serve`), in both protocol generations (README
"Long turns: what each kind of client sees", paths 5 and 6). Every task message goes through
tests/task_client.py, which checks it against the published schemas.

Three servers serve the whole module: one over HTTP for both generations, and one per generation
bound in memory (what stdio carries; the SDK keeps a stdio connection in the era of its first
handshake, as a real client would have its own process). The fixture MCP server runs in the
test's process too. What needs processes of its own (a task followed across a SIGKILL, a change
made by `parley answer` from another process) is in tests/test_e2e_mcp_tasks.py.
(2026-07-28 clients without the tasks extension keep getting MRTR: tests/test_mrtr.py.)
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError

from tests.support import (
    FIXTURE_LOG,
    TEST_DEADLINE_S,
    Database,
    call,
    db_rows,
    eventually,
    fixture_in_process,
    fixture_server,
    serving,
    write_config,
)
from tests.support import Served as ServedBase
from tests.task_client import (
    IMMEDIATE_RESPONSE_META,
    LEGACY,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    MODERN,
    RELATED_TASK_META,
    TaskRecorder,
    call_tool_as_task,
    call_tool_modern,
    cancel_task,
    cancel_task_modern,
    create_task,
    get_task,
    get_task_modern,
    is_terminal,
    list_tasks,
    poll_until,
    server_target,
    task_client,
    task_result,
    update_task,
)

pytestmark = pytest.mark.anyio

TASK_TOOLS = {"start_session", "send_message", "approve", "answer_question", "execute_plan"}
TASKS_SETTINGS = {"poll_interval_s": 0.1, "status_poll_s": 0.2, "list_page_size": 3}
INTERRUPT_ID = re.compile(r"int_[0-9a-f]{32}")
UNKNOWN_TASK = "task_" + "0" * 32
UNKNOWN_SESSION = "ses_" + "0" * 32
APPROVE = {"action": "accept", "content": {"decision": "approve"}}


def write_tasks_config(
    directory: Path,
    runtime: dict[str, Any] | None = None,
    database: Database | None = None,
    fixture: dict[str, Any] | None = None,
) -> Path:
    """parley.yaml with fast timings, the task settings, the fixture MCP server (logging every
    call it really runs to fixture.jsonl; `fixture`: its entry, by default over stdio) and the
    agent `worker` that uses it."""
    return write_config(
        directory,
        database=database,
        runtime=runtime,
        agents={"worker": {"mcp_servers": ["fixture"], "tools": ["ask_user"]}},
        mcp_servers={"fixture": fixture if fixture is not None else fixture_server(directory / FIXTURE_LOG)},
        tasks=TASKS_SETTINGS,
    )


@dataclass
class Served(ServedBase):
    """A server for this module; each test connects its own task clients."""

    def legacy(
        self, recorder: TaskRecorder | None = None
    ) -> AbstractAsyncContextManager[tuple[Client, TaskRecorder]]:
        """A 2025-11-25 client with form elicitation (answers from the recorder)."""
        recorder = recorder if recorder is not None else TaskRecorder(expect_related_task=True)
        return task_client(server_target(self.server), mode="legacy", recorder=recorder)

    def modern(
        self, recorder: TaskRecorder | None = None, *, declare_tasks: bool = True
    ) -> AbstractAsyncContextManager[tuple[Client, TaskRecorder]]:
        """A 2026-07-28 client with form elicitation that declares the tasks extension (or not)."""
        return task_client(server_target(self.server), recorder=recorder, declare_tasks=declare_tasks)


async def _serve(directory: Path, *, http: bool) -> AsyncIterator[Served]:
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_tasks_config(directory, fixture=fixture)
        async with serving(
            config, mode=None, name="tasks", http=http, clean_log=True, world=Served
        ) as served:
            yield served


@pytest.fixture(scope="module")
async def stdio_legacy(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """A server for 2025-11-25 clients bound in memory, as over stdio (a stdio connection keeps the
    era of its first handshake, so each era gets its own server, as it would with one client per
    process)."""
    async for served in _serve(tmp_path_factory.mktemp("tasks-stdio-legacy"), http=False):
        yield served


@pytest.fixture(scope="module")
async def stdio_modern(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """A server for 2026-07-28 clients bound in memory, as over stdio."""
    async for served in _serve(tmp_path_factory.mktemp("tasks-stdio-modern"), http=False):
        yield served


@pytest.fixture(scope="module")
async def http_served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """One HTTP server for both eras (every HTTP connection negotiates on its own)."""
    async for served in _serve(tmp_path_factory.mktemp("tasks-http"), http=True):
        yield served


@pytest.fixture(params=["stdio", "http"])
def legacy_served(request: pytest.FixtureRequest) -> Served:
    """A server for 2025-11-25 clients on each transport (for what the transport may change)."""
    chosen: Served = request.getfixturevalue("stdio_legacy" if request.param == "stdio" else "http_served")
    return chosen


@pytest.fixture(params=["stdio", "http"])
def modern_served(request: pytest.FixtureRequest) -> Served:
    """A server for 2026-07-28 clients on each transport."""
    chosen: Served = request.getfixturevalue("stdio_modern" if request.param == "stdio" else "http_served")
    return chosen


# ------------------------------------------------------------------ helpers


def wire_result(recorder: TaskRecorder, method: str) -> dict[str, Any]:
    """The raw result of the last `method` request the client sent, as it arrived on the wire."""
    request_id = recorder.requests_of(method)[-1]["id"]
    for message in recorder.received:
        if message.get("id") == request_id and "method" not in message and "result" in message:
            result: dict[str, Any] = message["result"]
            return result
    raise AssertionError(f"no response to {method} (id {request_id}) on the wire")


async def error_of(request: Awaitable[Any]) -> MCPError:
    with pytest.raises(MCPError) as failure:
        await request
    return failure.value


async def new_session(client: Client) -> str:
    created = await call(client, "start_session", agent="worker")
    assert created["status"] == "idle", created
    return str(created["session_id"])


async def session(client: Client, sid: str) -> dict[str, Any]:
    return await call(client, "get_session", session_id=sid, messages_from=1)


async def legacy_until(client: Client, task_id: str, status: str) -> dict[str, Any]:
    return await poll_until(lambda: get_task(client, task_id), lambda t: t["status"] == status)


async def modern_until(client: Client, task_id: str, status: str) -> dict[str, Any]:
    return await poll_until(lambda: get_task_modern(client, task_id), lambda t: t["status"] == status)


def is_ack(result: dict[str, Any]) -> bool:
    """A 2026-07-28 acknowledgement: complete, and saying nothing about the task."""
    return result["resultType"] == "complete" and not {"taskId", "status"} & set(result)


def pending_ids(snapshot: dict[str, Any]) -> list[str]:
    return [p["id"] for p in snapshot["pending"]]


# ------------------------------------------------------------------ 1. 2025-11-25: a task instead of a blocking call


async def test_legacy_client_sees_task_support_and_gets_the_turn_outcome_through_a_task(
    legacy_served: Served,
) -> None:
    async with legacy_served.legacy() as (client, recorder):
        assert client.protocol_version == LEGACY

        capabilities = wire_result(recorder, "initialize")["capabilities"]
        assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        await client.list_tools()
        support = {
            t["name"]: t["execution"]["taskSupport"] for t in wire_result(recorder, "tools/list")["tools"]
        }
        assert {name for name, s in support.items() if s == "optional"} == TASK_TOOLS
        assert {name for name, s in support.items() if s != "optional"} == set(support) - TASK_TOOLS
        assert set(support.values()) == {"optional", "forbidden"}
        assert "get_session" in support and "cancel_turn" in support

        sid = await new_session(client)
        created = await create_task(
            client, "send_message", {"session_id": sid, "message": "/sleep 1\nhello tasks"}, ttl_ms=60_000
        )
        task = created["task"]
        # It came back before the one-second turn ended.
        assert task["status"] == "working", task
        assert task["ttl"] == 60_000 and task["pollInterval"] == 100
        assert task["taskId"] in created["_meta"][IMMEDIATE_RESPONSE_META]

        done = await poll_until(lambda: get_task(client, task["taskId"]), is_terminal)
        assert done["status"] == "completed", done
        result = await task_result(client, task["taskId"])
        assert result["_meta"][RELATED_TASK_META] == {"taskId": task["taskId"]}
        outcome = result["structuredContent"]
        assert outcome["status"] == "answered" and outcome["session_id"] == sid
        assert outcome["answer"] == "You said: hello tasks (message 1 of this session)"
        assert not result.get("isError")
        assert "hello tasks" in result["content"][0]["text"]

        assert (await error_of(get_task(client, UNKNOWN_TASK))).error.code == -32602
        assert (await error_of(task_result(client, UNKNOWN_TASK))).error.code == -32602


# ------------------------------------------------------------------ 2. 2025-11-25: input through tasks/result


async def test_each_era_keeps_its_own_tool_listing_on_one_server(http_served: Served) -> None:
    """The listing is kept once per protocol version: clients of the two eras on one HTTP
    server, in turn, each get their era's listing every time (task support only for 2025-11-25)."""
    listings: dict[str, list[dict[str, Any]]] = {"legacy": [], "modern": []}
    for _ in range(2):
        for era in ("legacy", "modern"):
            connect = http_served.legacy() if era == "legacy" else http_served.modern()
            async with connect as (client, recorder):
                await client.list_tools()
                listings[era].append(wire_result(recorder, "tools/list"))
    for era, (first, second) in listings.items():
        assert first == second, era
    legacy_tools, modern_tools = listings["legacy"][0]["tools"], listings["modern"][0]["tools"]
    assert all("execution" in tool for tool in legacy_tools)
    assert not any("execution" in tool for tool in modern_tools)
    assert [t["name"] for t in legacy_tools] == [t["name"] for t in modern_tools]


async def test_legacy_task_parks_on_an_approval_answered_through_tasks_result(legacy_served: Served) -> None:
    served = legacy_served
    text = f"task ok {served.server.http}"
    recorder = TaskRecorder(expect_related_task=True, answers=[APPROVE])
    async with served.legacy(recorder) as (client, _):
        sid = await new_session(client)
        task = await call_tool_as_task(
            client,
            "send_message",
            {"session_id": sid, "message": f'/tool fixture__bare {{"text": "{text}"}}'},
        )
        waiting = await legacy_until(client, task["taskId"], "input_required")
        [interrupt_id] = pending_ids(await session(client, sid))
        assert interrupt_id in waiting["statusMessage"] and "fixture__bare" in waiting["statusMessage"]
        assert served.runs("bare", text=text) == 0, "nothing ran before the approval"

        # Blocks until the task ends; the approval is put to the person on its stream.
        result = await task_result(client, task["taskId"])
        [asked] = recorder.elicitations_for(task["taskId"])
        assert "fixture__bare" in asked.params["message"] and text in asked.params["message"]
        assert asked.params["requestedSchema"]["properties"]["decision"]["enum"] == ["approve", "deny"]
        outcome = result["structuredContent"]
        assert outcome["status"] == "answered", outcome
        assert f"bare {text}" in outcome["answer"]
        assert (await get_task(client, task["taskId"]))["status"] == "completed"
        assert (await session(client, sid))["pending"] == []
    assert served.runs("bare", text=text) == 1


async def test_legacy_task_question_answered_through_tasks_result(stdio_legacy: Served) -> None:
    recorder = TaskRecorder(
        expect_related_task=True, answers=[{"action": "accept", "content": {"answer": "blue"}}]
    )
    async with stdio_legacy.legacy(recorder) as (client, _):
        sid = await new_session(client)
        task = await call_tool_as_task(
            client, "send_message", {"session_id": sid, "message": "/ask Favourite colour? | red | blue"}
        )
        waiting = await legacy_until(client, task["taskId"], "input_required")
        [interrupt_id] = pending_ids(await session(client, sid))
        assert interrupt_id in waiting["statusMessage"] and "Favourite colour?" in waiting["statusMessage"]

        result = await task_result(client, task["taskId"])
        [asked] = recorder.elicitations_for(task["taskId"])
        assert asked.params["message"] == "Favourite colour?"
        assert asked.params["requestedSchema"]["properties"]["answer"]["enum"] == ["red", "blue"]
        outcome = result["structuredContent"]
        assert outcome["status"] == "answered" and "The user answered: blue" in outcome["answer"]
        assert (await session(client, sid))["pending"] == []


# ------------------------------------------------------------------ 3. 2026-07-28: the tasks extension


async def test_modern_task_takes_its_approval_through_tasks_update(modern_served: Served) -> None:
    served = modern_served
    text = f"modern {served.server.http}"
    async with served.modern() as (client, _):
        assert client.protocol_version == MODERN
        sid = await new_session(client)
        handle = await call_tool_modern(
            client,
            "send_message",
            {"session_id": sid, "message": f'/tool fixture__bare {{"text": "{text}"}}'},
        )
        assert handle["resultType"] == "task" and handle["status"] in {"working", "input_required"}, handle
        assert handle["ttlMs"] > 0 and handle["pollIntervalMs"] == 100
        task_id = handle["taskId"]

        first = await modern_until(client, task_id, "input_required")
        second = await get_task_modern(client, task_id)
        [interrupt_id] = pending_ids(await session(client, sid))
        assert list(first["inputRequests"]) == [f"approval:{interrupt_id}"]
        assert list(second["inputRequests"]) == list(first["inputRequests"]), "keys are stable across polls"
        [(key, request)] = first["inputRequests"].items()
        assert request["method"] == "elicitation/create" and "fixture__bare" in request["params"]["message"]
        assert served.runs("bare", text=text) == 0

        ack = await update_task(client, task_id, {key: APPROVE})
        assert is_ack(ack)
        done = await poll_until(lambda: get_task_modern(client, task_id), is_terminal)
        assert done["status"] == "completed", done
        outcome = done["result"]["structuredContent"]
        assert outcome["status"] == "answered" and f"bare {text}" in outcome["answer"]
        assert served.runs("bare", text=text) == 1

        unknown = await error_of(get_task_modern(client, UNKNOWN_TASK))
        assert unknown.error.code == -32602
        assert (await error_of(get_task_modern(client, "not-a-task-id"))).error.code == -32602

    async with served.modern(declare_tasks=False) as (client, _):
        refused = await error_of(get_task_modern(client, task_id))
        assert refused.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_modern_task_on_a_plain_turn_inlines_the_answer(stdio_modern: Served) -> None:
    async with stdio_modern.modern() as (client, _):
        sid = await new_session(client)
        handle = await call_tool_modern(
            client, "send_message", {"session_id": sid, "message": "/sleep 1\nmodern"}
        )
        assert handle["resultType"] == "task" and handle["status"] == "working", handle
        done = await poll_until(lambda: get_task_modern(client, handle["taskId"]), is_terminal)
        assert done["status"] == "completed"
        assert done["result"]["structuredContent"]["answer"] == "You said: modern (message 1 of this session)"


async def test_modern_two_approvals_are_answered_one_key_at_a_time(stdio_modern: Served) -> None:
    served = stdio_modern
    async with served.modern() as (client, _):
        sid = await new_session(client)
        message = '/tool fixture__bare {"text": "left"}\n/tool fixture__bare {"text": "right"}'
        handle = await call_tool_modern(client, "send_message", {"session_id": sid, "message": message})
        task_id = handle["taskId"]
        both = (await modern_until(client, task_id, "input_required"))["inputRequests"]
        assert {f"approval:{i}" for i in pending_ids(await session(client, sid))} == set(both)
        # Each form names its call; match by what it says, not by position.
        by_text = {("left" if "'left'" in r["params"]["message"] else "right"): k for k, r in both.items()}
        assert set(by_text) == {"left", "right"}, both

        await update_task(client, task_id, {by_text["left"]: APPROVE})

        def only_right_left(task: dict[str, Any]) -> bool:
            return task["status"] == "input_required" and list(task["inputRequests"]) == [by_text["right"]]

        await poll_until(lambda: get_task_modern(client, task_id), only_right_left)
        deny = {"action": "accept", "content": {"decision": "deny", "reason": "not this one"}}
        await update_task(client, task_id, {by_text["right"]: deny})
        done = await poll_until(lambda: get_task_modern(client, task_id), is_terminal)
        assert done["status"] == "completed", done
        answer = done["result"]["structuredContent"]["answer"]
        assert "bare left" in answer and "not this one" in answer
    assert served.runs("bare", text="left") == 1
    assert served.runs("bare", text="right") == 0


async def test_modern_answer_question_as_a_task_follows_the_turn_it_resumes(stdio_modern: Served) -> None:
    async with stdio_modern.modern() as (client, _):
        sid = await new_session(client)
        asking = await call_tool_modern(
            client, "send_message", {"session_id": sid, "message": "/ask Pick? | x | y"}
        )
        waiting = await modern_until(client, asking["taskId"], "input_required")
        [key] = waiting["inputRequests"]
        interrupt_id = key.removeprefix("question:")
        assert INTERRUPT_ID.fullmatch(interrupt_id), key

        answering = await call_tool_modern(
            client, "answer_question", {"session_id": sid, "interrupt_id": interrupt_id, "answer": "y"}
        )
        if answering.get("resultType") == "task":
            answering = (await poll_until(lambda: get_task_modern(client, answering["taskId"]), is_terminal))[
                "result"
            ]
        assert "The user answered: y" in answering["structuredContent"]["answer"]
        # The task of the message that asked ends with the same turn.
        done = await poll_until(lambda: get_task_modern(client, asking["taskId"]), is_terminal)
        assert done["status"] == "completed"
        assert done["result"]["structuredContent"]["turn_id"] == answering["structuredContent"]["turn_id"]


# ------------------------------------------------------------------ 4. cancelling


async def _until_turn_cancelled(client: Client, sid: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def cancelled() -> bool:
        seen.update(await session(client, sid))
        last = seen.get("last_turn") or {}
        return last.get("status") == "cancelled" and seen["status"] != "running"

    await eventually(cancelled, f"the turn of {sid} to be cancelled")
    return seen


async def test_legacy_cancel_stops_the_turn_and_drops_a_queued_message(stdio_legacy: Served) -> None:
    async with stdio_legacy.legacy() as (client, recorder):
        sid = await new_session(client)
        long = await call_tool_as_task(
            client, "send_message", {"session_id": sid, "message": "/sleep 3600\nlong"}
        )
        await poll_until(
            lambda: get_task(client, long["taskId"]), lambda t: "is running" in (t.get("statusMessage") or "")
        )
        queued = await call_tool_as_task(
            client, "send_message", {"session_id": sid, "message": "never answer this"}
        )
        assert queued["status"] == "working"
        assert [q["message"] for q in (await session(client, sid))["queued_messages"]] == [
            "never answer this"
        ]

        # A client blocked on tasks/result of the long task is answered when it is cancelled.
        waited: list[dict[str, Any]] = []

        async def wait_for_result() -> None:
            waited.append(await task_result(client, long["taskId"]))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_result)
            await recorder.wait_for(lambda r: bool(r.requests_of("tasks/result")), "tasks/result to be sent")

            dropped = await cancel_task(client, queued["taskId"])
            assert dropped["status"] == "cancelled"
            assert (await session(client, sid))["queued_messages"] == [], "the queued message is dropped"

            cancelled = await cancel_task(client, long["taskId"])
            assert cancelled["status"] == "cancelled"
        [result] = waited
        assert result["isError"] is True and "cancelled" in result["content"][0]["text"]

        snapshot = await _until_turn_cancelled(client, sid)
        assert snapshot["current_turn_id"] is None
        assert (await get_task(client, long["taskId"]))["status"] == "cancelled"

        again = await error_of(cancel_task(client, long["taskId"]))
        assert again.error.code == -32602 and "already ended" in again.error.message

        # The session goes on; the dropped message was never answered nor put in the history.
        after = await call(client, "send_message", session_id=sid, message="after")
        assert after["status"] == "answered"
        texts = [m["text"] for m in (await session(client, sid))["messages"]]
        assert "never answer this" not in " ".join(texts), texts
        assert (await get_task(client, queued["taskId"]))["status"] == "cancelled"
        statuses = [s["status"] for s in recorder.statuses_for(long["taskId"])]
        assert "completed" not in statuses


async def test_modern_cancel_acknowledges_and_cancels_the_turn(stdio_modern: Served) -> None:
    async with stdio_modern.modern() as (client, _):
        sid = await new_session(client)
        handle = await call_tool_modern(
            client, "send_message", {"session_id": sid, "message": "/sleep 3600\nstop"}
        )
        assert handle["resultType"] == "task"
        assert is_ack(await cancel_task_modern(client, handle["taskId"]))
        assert (await get_task_modern(client, handle["taskId"]))["status"] == "cancelled"
        snapshot = await _until_turn_cancelled(client, sid)
        assert snapshot["current_turn_id"] is None
        assert is_ack(await cancel_task_modern(client, handle["taskId"]))
        assert (await get_task_modern(client, handle["taskId"]))["status"] == "cancelled"


async def test_legacy_cancel_of_a_parked_task_never_runs_the_tool(stdio_legacy: Served) -> None:
    served = stdio_legacy
    async with served.legacy() as (client, _):
        sid = await new_session(client)
        message = '/tool fixture__bare {"text": "cancelled before approval"}'
        task = await call_tool_as_task(client, "send_message", {"session_id": sid, "message": message})
        await legacy_until(client, task["taskId"], "input_required")
        assert (await cancel_task(client, task["taskId"]))["status"] == "cancelled"
        snapshot = await _until_turn_cancelled(client, sid)
        assert snapshot["pending"] == [], "the approval went with the turn"
    assert served.runs("bare", text="cancelled before approval") == 0


async def test_legacy_approve_as_a_task_follows_the_turn_it_resumes(stdio_legacy: Served) -> None:
    served = stdio_legacy
    async with served.legacy() as (client, _):
        sid = await new_session(client)
        message = '/tool fixture__bare {"text": "approved by task"}'
        parked = await call_tool_as_task(client, "send_message", {"session_id": sid, "message": message})
        await legacy_until(client, parked["taskId"], "input_required")
        [interrupt_id] = pending_ids(await session(client, sid))

        decision = {"session_id": sid, "decisions": [{"interrupt_id": interrupt_id, "approved": True}]}
        approving = await call_tool_as_task(client, "approve", decision)
        result = await task_result(client, approving["taskId"])
        assert result["structuredContent"]["status"] == "answered"
        assert "bare approved by task" in result["structuredContent"]["answer"]
        # The message's own task ends with the same turn.
        first = await task_result(client, parked["taskId"])
        assert first["structuredContent"]["turn_id"] == result["structuredContent"]["turn_id"]

        # Deciding again changes nothing: a task that is complete at once, with the same outcome.
        again = await call_tool_as_task(client, "approve", decision)
        assert again["status"] == "completed"
        repeated = await task_result(client, again["taskId"])
        assert repeated["structuredContent"]["turn_id"] == result["structuredContent"]["turn_id"]
    assert served.runs("bare", text="approved by task") == 1


async def test_tasks_result_returns_when_another_client_approves_through_the_tool(
    http_served: Served,
) -> None:
    """A client that cannot show forms waits on tasks/result; a person approves elsewhere."""
    served = http_served
    url = served.server.url
    async with task_client(url, mode="legacy", elicitation_callback=None) as (client, recorder):
        sid = await new_session(client)
        message = '/tool fixture__bare {"text": "approved elsewhere"}'
        task = await call_tool_as_task(client, "send_message", {"session_id": sid, "message": message})
        await legacy_until(client, task["taskId"], "input_required")
        [interrupt_id] = pending_ids(await session(client, sid))

        results: list[dict[str, Any]] = []

        async def wait_for_result() -> None:
            results.append(await task_result(client, task["taskId"]))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_result)
            await recorder.wait_for(lambda r: bool(r.requests_of("tasks/result")), "tasks/result to be sent")
            async with served.server.client(mode="legacy") as other:
                decided = await call(
                    other,
                    "approve",
                    session_id=sid,
                    decisions=[{"interrupt_id": interrupt_id, "approved": True}],
                )
            assert decided["status"] == "answered"
        [result] = results
        assert result["structuredContent"]["status"] == "answered"
        assert "bare approved elsewhere" in result["structuredContent"]["answer"]
        assert recorder.elicitations == [], "a client without elicitation is not asked"
    assert served.runs("bare", text="approved elsewhere") == 1


# ------------------------------------------------------------------ 5. tasks/list


async def test_tasks_list_pages_through_this_principals_tasks_only(stdio_legacy: Served) -> None:
    served = stdio_legacy
    foreign = "task_" + "f" * 32
    async with served.legacy() as (client, _):
        # (Connected: the server has created its database.) A task of somebody else, as a
        # second principal's call would have stored it; only local callers exist on stdio.
        now = time.time()
        with sqlite3.connect(served.db, timeout=TEST_DEADLINE_S) as conn:
            conn.execute(
                "INSERT INTO tasks (id, owner, generation, tool, status, poll_interval_ms, created_at,"
                " updated_at, ttl_ms, expires_at) VALUES (?, 'someone-else', ?, 'start_session', 'working',"
                " 100, ?, ?, ?, ?)",
                (foreign, LEGACY, now, now, 600_000, now + 600),
            )
        mine = []
        for _ in range(4):
            task = await call_tool_as_task(client, "start_session", {"agent": "worker"})
            mine.append(task["taskId"])
        # A session only created has nothing to wait for: its task is complete at once.
        assert (await get_task(client, mine[0]))["status"] == "completed"
        # With a first message, the task follows the session's first turn.
        first = await call_tool_as_task(client, "start_session", {"agent": "worker", "message": "list me"})
        mine.append(first["taskId"])
        outcome = (await task_result(client, first["taskId"]))["structuredContent"]
        assert outcome["answer"] == "You said: list me (message 1 of this session)"

        seen: list[str] = []
        pages = 0
        cursor = None
        while True:
            page = await list_tasks(client, cursor)
            pages += 1
            assert len(page["tasks"]) <= 3
            seen += [t["taskId"] for t in page["tasks"]]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
            assert pages < 100
        assert pages >= 2
        assert len(seen) == len(set(seen)), "a task was listed twice"
        assert set(mine) <= set(seen)
        assert foreign not in seen
        assert (await error_of(get_task(client, foreign))).error.code == -32602
        assert (await error_of(cancel_task(client, foreign))).error.code == -32602

        garbage = await error_of(list_tasks(client, "not-a-cursor"))
        assert garbage.error.code == -32602 and "cursor" in garbage.error.message
    assert db_rows(served.db, "SELECT status FROM tasks WHERE id = ?", (foreign,)) == [("working",)]


# ------------------------------------------------------------------ 8. status notifications


async def test_legacy_client_is_told_each_status_change_ending_with_completed(legacy_served: Served) -> None:
    async with legacy_served.legacy() as (client, recorder):
        sid = await new_session(client)
        task = await call_tool_as_task(
            client, "send_message", {"session_id": sid, "message": "/sleep 1\nnotify"}
        )
        await recorder.wait_for(
            lambda r: any(s["status"] == "completed" for s in r.statuses_for(task["taskId"])),
            "a completed status notification",
        )
        statuses = recorder.statuses_for(task["taskId"])
        assert statuses[-1]["status"] == "completed"
        assert all(s["status"] in {"working", "completed"} for s in statuses), statuses
        result = await task_result(client, task["taskId"])
        assert result["structuredContent"]["answer"] == "You said: notify (message 1 of this session)"


# ------------------------------------------------------------------ 9. bad input


async def test_legacy_bad_task_requests_are_refused_or_fail_with_the_reason(stdio_legacy: Served) -> None:
    async with stdio_legacy.legacy() as (client, _):
        sid = await new_session(client)
        negative = await error_of(
            create_task(client, "send_message", {"session_id": sid, "message": "x"}, ttl_ms=-5)
        )
        assert negative.error.code == -32602 and "task.ttl" in negative.error.message
        assert (await session(client, sid))["turn_count"] == 0, "a refused task sends nothing"

        refused = await call_tool_as_task(
            client, "send_message", {"session_id": UNKNOWN_SESSION, "message": "anyone there?"}
        )
        assert refused["status"] == "failed", refused
        assert UNKNOWN_SESSION in (refused.get("statusMessage") or "")
        result = await task_result(client, refused["taskId"])
        assert result["isError"] is True and UNKNOWN_SESSION in result["content"][0]["text"]
        assert (await get_task(client, refused["taskId"]))["status"] == "failed"

        # A longer TTL than tasks.max_ttl_s (30 days) is lowered to it.
        capped = await call_tool_as_task(client, "start_session", {"agent": "worker"}, ttl_ms=10**13)
        assert capped["ttl"] == 30 * 86_400 * 1000
        # A task past its TTL is gone.
        brief = await call_tool_as_task(client, "start_session", {"agent": "worker"}, ttl_ms=1)

        async def expired() -> bool:
            try:
                await get_task(client, brief["taskId"])
            except MCPError as exc:
                return exc.error.code == -32602
            return False

        await eventually(expired, "the one-millisecond task to expire")


async def test_modern_refused_call_returns_the_plain_error_not_a_task(stdio_modern: Served) -> None:
    async with stdio_modern.modern() as (client, _):
        plain = await call_tool_modern(
            client, "send_message", {"session_id": UNKNOWN_SESSION, "message": "anyone there?"}
        )
        assert plain.get("resultType", "complete") == "complete" and "taskId" not in plain
        assert plain["isError"] is True and UNKNOWN_SESSION in plain["content"][0]["text"]


async def test_legacy_task_augmented_call_of_a_forbidden_tool_is_method_not_found(
    stdio_legacy: Served,
) -> None:
    """2025-11-25, tools: a tool whose taskSupport is forbidden called as a task SHOULD get -32601."""
    answer: object
    async with stdio_legacy.legacy() as (client, _):
        sid = await new_session(client)
        try:
            answer = await create_task(client, "get_session", {"session_id": sid})
        except MCPError as exc:
            answer = exc.error.code
        except AssertionError as exc:  # not a CreateTaskResult: a plain CallToolResult
            answer = str(exc)[:300]
    assert answer == -32601, answer
