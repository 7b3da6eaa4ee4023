"""MCP tasks that need processes of their own: a task followed to its end across a SIGKILL of
the `parley serve` that ran it (and a turn resumed by the next process), and a change made by
another process (`parley answer` on the same database) pushed to the watching client. The rest
of the task behaviour runs in the test's process: tests/test_mcp_tasks.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.support import REPO, STATE_WINDOW_S, TEST_DEADLINE_S, Database, ServerProcess, serving
from tests.task_client import TaskRecorder, call_tool_as_task, get_task, is_terminal, poll_until, task_result
from tests.test_mcp_tasks import APPROVE, Served, legacy_until, new_session, session, write_tasks_config

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def stdio_legacy(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """A server for 2025-11-25 clients bound in memory, with the fixture MCP server over stdio."""
    config = write_tasks_config(tmp_path_factory.mktemp("tasks-stdio-legacy"))
    async with serving(config, mode=None, name="tasks", clean_log=True, world=Served) as served:
        yield served


async def test_a_change_made_by_another_process_is_pushed_too(stdio_legacy: Served) -> None:
    """A question answered out of band (`parley answer`, another process on the same database)
    still reaches the watching client as a status change."""
    recorder = TaskRecorder(expect_related_task=True)
    async with stdio_legacy.legacy(recorder) as (client, recorder):
        sid = await new_session(client)
        task = await call_tool_as_task(
            client, "send_message", {"session_id": sid, "message": "/ask Which colour? | red | blue"}
        )
        pending = await poll_until(
            lambda: get_task(client, task["taskId"]), lambda t: t["status"] == "input_required"
        )
        interrupt_id = pending["statusMessage"].split("(")[1].split(")")[0]
        answered = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "parley",
                    "answer",
                    "--db",
                    str(stdio_legacy.db),
                    sid,
                    interrupt_id,
                    "red",
                ],
                capture_output=True,
                text=True,
                timeout=TEST_DEADLINE_S,
                cwd=REPO,
            )
        )
        assert answered.returncode == 0, answered.stderr
        await recorder.wait_for(
            lambda r: any(s["status"] == "completed" for s in r.statuses_for(task["taskId"])),
            "the completed status, pushed after another process answered",
        )
        result = await task_result(client, task["taskId"])
    assert "The user answered: red" in result["structuredContent"]["answer"]


# ------------------------------------------------------------------ 6. a task outlives its process


# A turn that must still be running when its process is killed, and end by itself afterwards.
SLOW_SURVIVOR = f"/sleep {max(3.0, STATE_WINDOW_S):g}\nslow survivor"


# Also on PostgreSQL: stored task handles, a turn resumed by the next process, a parked approval.
@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_a_task_is_followed_to_its_end_across_a_sigkill(tmp_path: Path, database: Database) -> None:
    config = write_tasks_config(tmp_path, runtime={"lease_ttl_s": 0.3}, database=database)
    first = ServerProcess(config, name="doomed", db=database.db_arg)
    async with first as server:
        served = Served(server, tmp_path)
        async with served.legacy() as (client, _):
            slow_sid = await new_session(client)
            parked_sid = await new_session(client)
            parked = await call_tool_as_task(
                client,
                "send_message",
                {"session_id": parked_sid, "message": '/tool fixture__bare {"text": "survivor"}'},
            )
            await legacy_until(client, parked["taskId"], "input_required")
            # Started last, and the process is killed as soon as its turn is seen running.
            slow = await call_tool_as_task(
                client, "send_message", {"session_id": slow_sid, "message": SLOW_SURVIVOR}
            )
            await poll_until(
                lambda: get_task(client, slow["taskId"]),
                lambda t: "is running" in (t.get("statusMessage") or ""),
            )
        server.send_signal(signal.SIGKILL)
        assert await server.wait_exit() == -signal.SIGKILL

    recorder = TaskRecorder(expect_related_task=True, answers=[APPROVE])
    async with ServerProcess(config, name="restarted", db=database.db_arg) as server:
        served = Served(server, tmp_path)
        async with served.legacy(recorder) as (client, _):
            done = await poll_until(lambda: get_task(client, slow["taskId"]), is_terminal)
            assert done["status"] == "completed", done
            outcome = (await task_result(client, slow["taskId"]))["structuredContent"]
            assert outcome["answer"] == "You said: slow survivor (message 1 of this session)"
            answers = [m for m in (await session(client, slow_sid))["messages"] if m["role"] == "assistant"]
            assert len(answers) == 1, answers

            waiting = await get_task(client, parked["taskId"])
            assert waiting["status"] == "input_required", waiting
            assert served.runs("bare", text="survivor") == 0
            result = await task_result(client, parked["taskId"])
            assert len(recorder.elicitations_for(parked["taskId"])) == 1
            assert result["structuredContent"]["status"] == "answered"
            assert "bare survivor" in result["structuredContent"]["answer"]
        assert served.runs("bare", text="survivor") == 1
        assert "Traceback" not in server.log(), server.log()
