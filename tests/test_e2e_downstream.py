"""Downstream long-running tools and input requests that need processes: server-everything from
npm (its task-required tool `simulate-research-query`, ~4 s in four stages, which asks a
clarification on the task's `tasks/result` stream when `ambiguous`), over stdio and over
streamable HTTP on 127.0.0.1, and restarts of `parley serve` in the middle of downstream tasks
and questions. The questions of our fixture server's `paint` are tested in-process in
tests/test_downstream.py, whose helpers this module shares.

One HTTP parley in the test's process serves most of the module; the restart tests run their own
`parley serve` on a database they stop (SIGTERM) or kill (SIGKILL) in the middle of the
downstream tasks. The
published server-everything binds a task to the MCP session that created it, so a restarted
parley (a new session) can never find it again; the test of a task that survives the restart
runs server-everything with tests/mcp_servers/durable_tasks.mjs preloaded, which gives it a task
store that outlives sessions.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.npm_servers import DURABLE_TASKS_SHIM, LOOPBACK_SHIM, everything_bin, everything_sdk_module
from tests.support import (
    TEST_DEADLINE_S,
    ServerProcess,
    call,
    db_rows,
    eventually,
    fixture_server,
    running_server,
    until_listening,
)
from tests.test_downstream import (
    NO_APPROVAL,
    QUESTION_WAIT_S,
    World,
    _calls,
    _ended,
    _events,
    _only_call,
    _write,
)

# everything_bin is a fixture (session-scoped: installs server-everything from npm once);
# importing it here is what makes pytest find it.
__all__ = ["everything_bin"]

pytestmark = pytest.mark.anyio

RESEARCH = "simulate-research-query"
# server-everything asks for a poll interval of 1 s; a ceiling of 1 s keeps polls from backing off.
TASK_TIMINGS = {"task_poll_min_s": 0.2, "task_poll_max_s": 1.0, "input_wait_s": QUESTION_WAIT_S}
TASK_STORE_MODULE = "dist/esm/experimental/tasks/stores/in-memory.js"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stdio_servers(parley: ServerProcess) -> list[int]:
    """The server-everything processes this parley started over stdio (read from /proc).

    They outlive a killed parley: stdin closing does not stop them while timers of their tasks
    (a 5-minute TTL) keep Node's event loop alive, so the tests end them by their ids."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parley.pid and b"mcp-server-everything" in command:
            found.append(int(stat.parent.name))
    return found


def _end_processes(pids: list[int]) -> None:
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # already gone
        if b"mcp-server-everything" in command:
            os.kill(pid, signal.SIGTERM)


def _research(server: str, topic: str, ambiguous: bool = False) -> str:
    return f"/tool {server}__{RESEARCH} " + json.dumps({"topic": topic, "ambiguous": ambiguous})


def _everything_stdio(binary: Path, **settings: Any) -> dict[str, Any]:
    return {"command": str(binary), "args": ["stdio"], **TASK_TIMINGS, **settings}


def _researcher(server: str) -> dict[str, Any]:
    # The tool is a non-idempotent write by its annotations; these agents may run it unasked.
    return {"mcp_servers": [{"server": server, "tools": {RESEARCH: NO_APPROVAL}}]}


@dataclass
class EverythingHttp:
    url: str
    log: Path  # its stdout and stderr


@asynccontextmanager
async def _serve_everything_http(
    binary: Path, directory: Path, *, durable: bool = False
) -> AsyncIterator[EverythingHttp]:
    """server-everything in its streamable HTTP mode, bound to 127.0.0.1 on a free port;
    `durable`: its tasks outlive the MCP session that created them (see durable_tasks.mjs)."""
    port = _free_port()
    log = directory / "everything.log"
    env = {**os.environ, "PORT": str(port), "NODE_OPTIONS": f"--require {LOOPBACK_SHIM}"}
    if durable:
        env["NODE_OPTIONS"] += f" --import {DURABLE_TASKS_SHIM.as_uri()}"
        env["DURABLE_TASKS_STORE"] = str(everything_sdk_module(binary, TASK_STORE_MODULE))
    with (
        log.open("ab") as out,
        subprocess.Popen(  # noqa: ASYNC220 - started once per module, before any await depends on it
            [str(binary), "streamableHttp"], env=env, stdout=out, stderr=out
        ) as process,
    ):
        try:

            def alive() -> None:
                assert process.poll() is None, "server-everything exited:\n" + log.read_text()

            url = f"http://127.0.0.1:{port}/mcp"
            await until_listening(url, "server-everything to listen over HTTP", alive)
            yield EverythingHttp(url, log)
        finally:
            process.terminate()
            process.wait(timeout=TEST_DEADLINE_S)


@pytest.fixture(scope="module")
async def everything_http(
    everything_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[EverythingHttp]:
    """server-everything over HTTP, as published: its tasks belong to the MCP session."""
    async with _serve_everything_http(everything_bin, tmp_path_factory.mktemp("everything-http")) as served:
        yield served


@pytest.fixture(scope="module")
async def durable_everything_http(
    everything_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[EverythingHttp]:
    """server-everything over HTTP whose tasks outlive the MCP session that created them."""
    directory = tmp_path_factory.mktemp("everything-http-durable")
    async with _serve_everything_http(everything_bin, directory, durable=True) as served:
        yield served


def _paint_server(log: Path, **settings: Any) -> dict[str, Any]:
    return fixture_server(log, tools={"paint": NO_APPROVAL}, **settings)


@pytest.fixture(scope="module")
async def world(
    everything_bin: Path, everything_http: EverythingHttp, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("downstream")
    servers: dict[str, Any] = {
        "everything": _everything_stdio(everything_bin),
        "everything_http": {"url": everything_http.url, **TASK_TIMINGS},
    }
    agents = {"r": _researcher("everything"), "rh": _researcher("everything_http")}
    config = _write(directory, servers, agents)
    async with running_server(config, http=True) as (server, client):
        try:
            yield World(server, client, directory / "parley.db")
            assert "Traceback" not in server.log(), server.log()
        finally:
            leftovers = _stdio_servers(server)
    _end_processes(leftovers)


async def _waiting_for_task(db: Path, session_ids: list[str]) -> None:
    async def all_waiting() -> bool:
        rows = [_calls(db, sid) for sid in session_ids]
        return all(
            len(calls) == 1 and calls[0][0] == "waiting_for_task" and (calls[0][1] or {}).get("task_id")
            for calls in rows
        )

    await eventually(all_waiting, f"{len(session_ids)} call(s) to wait for their downstream task")


# ---------------------------------------------------------------------- a. tasks and their questions


@pytest.fixture(scope="module")
async def research(world: World) -> dict[str, str]:
    """Research sessions started together (their tasks run side by side): a plain one, and two
    ambiguous ones (server-everything over stdio and over HTTP) whose tasks ask which "python"
    is meant."""
    messages = {
        "plain": ("r", _research("everything", "tides")),
        "everything": ("r", _research("everything", "python", ambiguous=True)),
        "everything_http": ("rh", _research("everything_http", "python", ambiguous=True)),
    }
    started = {}
    for name, (agent, message) in messages.items():
        outcome = await call(world.client, "start_session", agent=agent, message=message, wait_seconds=0)
        started[name] = str(outcome["session_id"])
    return started


async def test_a_task_required_tool_runs_as_a_task_and_its_report_reaches_the_model(
    world: World, research: dict[str, str]
) -> None:
    sid = research["plain"]
    ended = await _ended(world, sid)
    assert ended["status"] == "answered", ended
    assert "Research Report: tides" in ended["answer"]
    assert _only_call(ended)["status"] == "succeeded"
    [(status, remote, _)] = _calls(world.db, sid)
    assert status == "succeeded"
    assert remote is not None and remote["kind"] == "task" and remote["task_id"]
    assert remote["generation"] == "2025-11-25"
    waits = [e for e in _events(world.db, sid, "tool_remote") if e["status"] == "waiting_for_task"]
    assert waits and all(e["task_id"] == remote["task_id"] for e in waits), "it waited on the task"
    assert len(waits) >= 2, "the task was polled more than once (it runs ~4 s)"
    parked = _events(world.db, sid, "turn_parked")
    assert len(parked) >= len(waits), "the turn parked after every poll that left the task running"
    assert all(not p["waiting_for_input"] and p["wake_at"] is not None for p in parked)


@pytest.mark.parametrize("server", ["everything", "everything_http"])
async def test_a_question_asked_during_a_task_becomes_our_question_and_its_answer_reaches_the_server(
    world: World, research: dict[str, str], server: str
) -> None:
    sid = research[server]

    async def asked() -> bool:
        return bool(db_rows(world.db, "SELECT 1 FROM interrupts WHERE session_id = ?", (sid,)))

    await eventually(asked, "the task's question to reach the session")
    waiting = await call(world.client, "get_session", session_id=sid)
    assert waiting["status"] == "waiting_for_input", waiting
    [pending] = waiting["pending"]
    assert pending["kind"] == "question"
    assert "could have multiple interpretations" in pending["question"]
    assert pending["choices"] == ["programming", "snake", "comedy"]
    assert not pending["allows_free_text"]
    done = await call(
        world.client, "answer_question", session_id=sid, interrupt_id=pending["id"], answer="snake"
    )
    assert done["status"] == "answered", done
    assert "Research Report: python (snake)" in done["answer"]
    assert _only_call(done)["status"] == "succeeded"
    [(_, remote, _)] = _calls(world.db, sid)
    assert remote is not None and remote["task_id"], "the question came during the task"


# ---------------------------------------------------------------------- e. cancelling


async def test_cancelling_the_turn_cancels_the_downstream_task(world: World) -> None:
    started = await call(
        world.client, "start_session", agent="r", message=_research("everything", "cancelled"), wait_seconds=0
    )
    sid = started["session_id"]
    await _waiting_for_task(world.db, [sid])
    [(_, remote, _)] = _calls(world.db, sid)
    assert remote is not None
    task_id = remote["task_id"]
    cancelled = await call(world.client, "cancel_turn", session_id=sid)
    assert cancelled["status"] == "cancelled", cancelled
    call_ = _only_call(cancelled)
    assert call_["status"] == "outcome_unknown", "a write under way downstream may have had its effect"
    # server-everything logs (on its stderr, which is parley's log for a stdio server) that its
    # research could not go on once the task was cancelled: the cancel reached it.
    refused = f'Cannot update task "{task_id}" from terminal status "cancelled"'

    async def server_saw_the_cancel() -> bool:
        return refused in world.server.log()

    await eventually(server_saw_the_cancel, "server-everything to report the task cancelled")
    assert [status for status, _, _ in _calls(world.db, sid)] == ["outcome_unknown"]
    assert not any(e["status"] == "succeeded" for e in _events(world.db, sid, "tool_remote"))


# ---------------------------------------------------------------------- f. at rest between polls


async def test_between_polls_no_turn_runs_and_no_lease_is_held_while_ten_tasks_run(world: World) -> None:
    session_ids: list[str] = []

    async def start(n: int) -> None:
        started = await call(
            world.client,
            "start_session",
            agent="r",
            message=_research("everything", f"topic {n}"),
            wait_seconds=0,
        )
        session_ids.append(started["session_id"])

    async with anyio.create_task_group() as tg:
        for n in range(10):
            tg.start_soon(start, n)
    await _waiting_for_task(world.db, session_ids)
    seen: list[dict[str, Any]] = []

    def waiting() -> int:
        marks = ",".join("?" * len(session_ids))
        [(count,)] = db_rows(
            world.db,
            f"SELECT COUNT(*) FROM tool_calls WHERE status = 'waiting_for_task' AND session_id IN ({marks})",
            tuple(session_ids),
        )
        return int(count)

    async def at_rest() -> bool:
        before = waiting()
        health = await world.health()
        after = waiting()
        seen.append({**health, "waiting": (before, after)})
        assert before, f"the tasks ended before parley was seen at rest: {seen}"
        return (
            before == after == 10
            and health["running_turns"] == 0
            and health["leased_sessions"] == 0
            and health["downstream_requests"] == 0
        )

    await eventually(at_rest, "parley to hold no turn, no lease and no request while ten tasks wait")
    assert seen[-1]["downstream_connections"] >= 1
    for sid in session_ids:
        ended = await _ended(world, sid)
        assert ended["status"] == "answered", ended
        assert "Research Report: topic" in ended["answer"]
        assert [status for status, _, _ in _calls(world.db, sid)] == ["succeeded"]
    leases = db_rows(
        world.db,
        f"SELECT COUNT(*) FROM sessions WHERE lease_owner IS NOT NULL AND id IN ({','.join('?' * 10)})",
        tuple(session_ids),
    )
    assert leases == [(0,)]


# ---------------------------------------------------------------------- b, c. restarts


@dataclass
class Restarted:
    db: Path
    sessions: dict[str, str]  # agent -> session id
    tasks: dict[str, str]  # agent -> downstream task id
    outcomes: dict[str, dict[str, Any]]  # agent -> the session's last turn after the restart
    stopped_at: float  # when the first parley was sent its signal


RESTART_AGENTS = {
    # agent -> server: server-everything over stdio, over HTTP as published, and over HTTP with
    # tasks that outlive their MCP session.
    "r": "everything",
    "rh": "everything_http",
    "rd": "durable_http",
}


@pytest.fixture(scope="module", params=[signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def restarted(
    request: pytest.FixtureRequest,
    everything_bin: Path,
    everything_http: EverythingHttp,
    durable_everything_http: EverythingHttp,
    tmp_path_factory: pytest.TempPathFactory,
) -> Restarted:
    """Three research tasks under way when parley is stopped (SIGTERM) or killed (SIGKILL); a new
    parley on the same database takes them over."""
    ending = signal.Signals(request.param)
    directory = tmp_path_factory.mktemp(f"downstream-restart-{ending.name.lower()}")
    servers = {
        "everything": _everything_stdio(everything_bin),
        "everything_http": {"url": everything_http.url, **TASK_TIMINGS},
        "durable_http": {"url": durable_everything_http.url, **TASK_TIMINGS},
    }
    config = _write(
        directory, servers, {agent: _researcher(server) for agent, server in RESTART_AGENTS.items()}
    )
    db = directory / "parley.db"
    async with ServerProcess(config, name="first") as first, first.client() as client:
        sessions = {}
        for agent, server in RESTART_AGENTS.items():
            started = await call(
                client,
                "start_session",
                agent=agent,
                message=_research(server, f"restart {server}"),
                wait_seconds=0,
            )
            sessions[agent] = started["session_id"]
        await _waiting_for_task(db, list(sessions.values()))
        leftovers = _stdio_servers(first)
        stopped_at = time.time()
        first.send_signal(ending)
        code = await first.wait_exit()
        assert code == (0 if ending == signal.SIGTERM else -signal.SIGKILL), first.log()
    tasks = {agent: str((_calls(db, sid)[0][1] or {})["task_id"]) for agent, sid in sessions.items()}
    async with ServerProcess(config, name="second") as second, second.client() as client:
        outcomes = {}
        for agent, sid in sessions.items():
            snapshot = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
            outcomes[agent] = snapshot["last_turn"]
        leftovers += _stdio_servers(second)
    _end_processes(leftovers)
    return Restarted(db, sessions, tasks, outcomes, stopped_at)


async def test_after_a_restart_polling_resumes_and_an_http_task_completes(restarted: Restarted) -> None:
    outcome = restarted.outcomes["rd"]
    assert outcome["status"] == "answered", outcome
    [call_] = outcome["tool_calls"]
    assert call_["status"] == "succeeded", call_
    assert "Research Report: restart durable_http" in outcome["answer"]
    [(status, remote, _)] = _calls(restarted.db, restarted.sessions["rd"])
    assert status == "succeeded" and remote is not None and remote["task_id"] == restarted.tasks["rd"]
    # It was waiting for its task when parley stopped; the new parley polled it to its end.
    [(finished_at,)] = db_rows(
        restarted.db, "SELECT updated_at FROM tool_calls WHERE session_id = ?", (restarted.sessions["rd"],)
    )
    assert finished_at > restarted.stopped_at
    polls = _events(restarted.db, restarted.sessions["rd"], "tool_remote")
    assert all(e["task_id"] == restarted.tasks["rd"] for e in polls), "no second task was started"


@pytest.mark.parametrize("agent", ["r", "rh"])
async def test_a_task_the_server_forgot_across_the_restart_is_recorded_by_effect(
    restarted: Restarted, agent: str
) -> None:
    """stdio: the server process died with parley. HTTP as published: the task belonged to the
    MCP session of the parley that was killed, and the new parley has a new session."""
    outcome = restarted.outcomes[agent]
    assert outcome["status"] == "answered", "the turn still ends: the model answers"
    [call_] = outcome["tool_calls"]
    assert call_["status"] == "outcome_unknown", call_
    assert f"The downstream task {restarted.tasks[agent]} of" in call_["result"]
    assert "was lost: the server no longer knows it" in call_["result"]
    assert "may or may not have taken effect" in call_["result"]


async def test_a_question_of_a_call_that_died_with_parley_does_not_keep_the_turn_waiting(
    tmp_path: Path,
) -> None:
    """A 2025-11-25 server asked during an open call; parley was killed with the question pending.
    The call died with the process, so nobody can take the answer to the server any more: once
    the question's wait is over (2 s, gone by the time parley has restarted) the turn must end
    with the call recorded by its effect, not wait for the user for ever."""
    log = tmp_path / "paint.jsonl"
    paint = _paint_server(log, protocol="legacy", input_wait_s=2)
    config = _write(tmp_path, {"paint": paint}, {"p": {"mcp_servers": ["paint"]}})
    db = tmp_path / "parley.db"
    async with ServerProcess(config, name="first") as first, first.client() as client:
        started = await call(
            client, "start_session", agent="p", message='/tool paint__paint {"item": "attic"}'
        )
        assert started["status"] == "waiting_for_input", started
        first.send_signal(signal.SIGKILL)
        await first.wait_exit()
    sid = started["session_id"]
    [(deadline,)] = db_rows(db, "SELECT deadline FROM interrupts WHERE session_id = ?", (sid,))
    async with ServerProcess(config, name="second") as second, second.client() as client:

        def turn_over() -> bool:
            return db_rows(db, "SELECT current_turn_id FROM sessions WHERE id = ?", (sid,)) == [(None,)]

        # The restarted parley has until the question is over, and the test deadline, to notice.
        with anyio.move_on_after(max(0.0, deadline - time.time()) + TEST_DEADLINE_S):
            while not turn_over():  # noqa: ASYNC110 - the state is in another process's database
                await anyio.sleep(0.05)
        snapshot = await call(client, "get_session", session_id=sid)
    assert turn_over(), f"the turn still waits: {snapshot['status']}, pending {snapshot['pending']}"
    [call_] = snapshot["last_turn"]["tool_calls"]
    assert call_["status"] == "outcome_unknown", call_
    assert snapshot["pending"] == []


async def test_a_task_whose_server_stays_unreachable_is_recorded_by_effect(
    everything_bin: Path, tmp_path: Path
) -> None:
    """The server of a running downstream task goes away for good: after task_poll_failures
    failed polls in a row the call is recorded by its effect and the turn ends."""
    everything_dir = tmp_path / "everything"
    everything_dir.mkdir()
    async with AsyncExitStack() as stack:
        everything = await stack.enter_async_context(_serve_everything_http(everything_bin, everything_dir))
        gone = {
            "url": everything.url,
            **TASK_TIMINGS,
            "task_poll_max_s": 0.3,
            "task_poll_failures": 2,
            "connect_timeout_s": 2,
            "call_timeout_s": 2,
        }
        config = _write(tmp_path, {"gone": gone}, {"g": _researcher("gone")})
        db = tmp_path / "parley.db"
        async with ServerProcess(config, name="unreachable") as server, server.client() as client:
            started = await call(
                client,
                "start_session",
                agent="g",
                message=f'/tool gone__{RESEARCH} {{"topic": "gone"}}',
                wait_seconds=0,
            )
            sid = started["session_id"]

            async def waiting_for_task() -> bool:
                return [status for status, _, _ in _calls(db, sid)] == ["waiting_for_task"]

            await eventually(waiting_for_task, "the call to wait for its downstream task")
            await stack.aclose()  # server-everything stops, and with it the task
            ended = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    [call_] = ended["last_turn"]["tool_calls"]
    assert ended["last_turn"]["status"] == "answered", ended["last_turn"]
    assert call_["status"] == "outcome_unknown", call_
    assert "could not be reached 2 times in a row" in call_["result"]
    assert "may or may not have taken effect" in call_["result"]
