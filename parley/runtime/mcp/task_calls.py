"""Downstream tools that run as MCP tasks: started once, then polled on stored timers.

Starting returns the task's handle, which the driver stores on the tool call before anything
else; from then on the call waits (`waiting_for_task`, with a wake time) and the turn parks, so
between two polls no request is in flight and no worker or lease is held. Each poll is one
`tasks/get`; when the task ends (or needs input, which the server asks on `tasks/result`'s
stream) the result is fetched and becomes the call's result. A task the server no longer knows
(it expired, or its stdio server was restarted) or cannot be reached for `task_poll_failures`
polls in a row is recorded by the call's effect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from mcp.types import Tool

from parley.config import McpServerConfig
from parley.runtime.mcp.connection import Asker
from parley.runtime.mcp.remote import CORE_TASKS_VERSION, RemoteTask
from parley.runtime.mcp.results import convert_result
from parley.runtime.mcp.sources import CallMaybeSent, CallNotSent, CallRefused, McpToolSources
from parley.runtime.tool_run import ToolRun, by_effect, failed
from parley.storage.base import ToolCallRecord

logger = logging.getLogger(__name__)

BACKOFF = 1.5


class TaskCalls:
    def __init__(self, sources: McpToolSources, clock: Callable[[], float]) -> None:
        self._sources = sources
        self._clock = clock

    @property
    def servers(self) -> Mapping[str, McpServerConfig]:
        return self._sources.servers

    def wants_task(self, server: str, listed: Tool | None) -> bool:
        """Whether to call this tool as a task: the server requires it, or offers it and the
        server's configuration says to take the offer."""
        execution = listed.execution if listed is not None else None
        support = execution.task_support if execution is not None else None
        cfg = self._sources.servers.get(server)
        return support == "required" or (
            support == "optional" and cfg is not None and cfg.call_as_task == "when_offered"
        )

    async def start(self, call: ToolCallRecord, session_id: str) -> ToolRun:
        server, tool = call.server or "", call.tool or call.name
        try:
            task = await self._sources.start_task(
                server, tool, call.arguments, session_id=session_id, idempotency_key=call.idempotency_key
            )
        except CallNotSent as exc:
            return failed(f"The call did not run, so it is safe to call again later: {exc}.")
        except CallRefused as exc:
            return failed(str(exc))
        except CallMaybeSent as exc:
            return by_effect(call.effect, f"Starting the task failed: {exc}.")
        remote = {
            "kind": "task",
            "generation": CORE_TASKS_VERSION,
            "task_id": task.task_id,
            "polls": 0,
            "failures": 0,
            "server_interval_s": task.poll_interval_s,
        }
        return self._wait(call, remote, task)

    async def poll(self, call: ToolCallRecord, session_id: str, on_input: Asker | None) -> ToolRun:
        """Look at the task once; fetch its result when it has ended or needs input."""
        remote = dict(call.remote or {})
        server, task_id = call.server or "", str(remote.get("task_id"))
        try:
            task = await self._sources.get_task(server, session_id, task_id)
        except CallRefused as exc:
            return self._lost(call, task_id, f"the server no longer knows it ({exc})")
        except (CallNotSent, CallMaybeSent) as exc:
            return self._unreachable(call, remote, str(exc))
        if task.status == "working":
            return self._wait(call, remote, task)
        if task.status == "cancelled":
            return by_effect(
                call.effect,
                f"The server cancelled task {task_id} ({task.status_message or 'no reason given'}).",
            )
        # completed, failed, or input_required: tasks/result answers (asking for input first).
        try:
            result = await self._sources.task_result(server, session_id, task_id, on_input)
        except CallRefused as exc:
            return self._lost(call, task_id, f"its result could not be fetched ({exc})")
        except (CallNotSent, CallMaybeSent) as exc:
            return self._unreachable(call, remote, str(exc))
        cfg = self._sources.servers.get(server)
        stored = convert_result(result, cfg.max_result_chars if cfg else 20_000)
        return ToolRun(status="failed" if stored["is_error"] else "succeeded", result=stored)

    async def cancel(self, call: ToolCallRecord, session_id: str) -> None:
        """Ask the server to cancel the task (best effort: the turn ends either way)."""
        task_id = (call.remote or {}).get("task_id")
        if not task_id or not call.server:
            return
        try:
            await self._sources.cancel_task(call.server, session_id, str(task_id))
        except Exception as exc:
            logger.info("could not cancel downstream task %s of call %s: %s", task_id, call.id, exc)

    def _wait(self, call: ToolCallRecord, remote: dict[str, Any], task: RemoteTask) -> ToolRun:
        cfg = self._sources.servers.get(call.server or "")
        polls = int(remote.get("polls", 0))
        floor = max(cfg.task_poll_min_s if cfg else 0.5, task.poll_interval_s or 0.0)
        ceiling = cfg.task_poll_max_s if cfg else 60.0
        interval = min(floor * BACKOFF ** min(polls, 50), max(ceiling, floor))
        remote = {
            **remote,
            "polls": polls + 1,
            "failures": 0,
            "task_status": task.status,
            "status_message": task.status_message,
        }
        return ToolRun(status="waiting_for_task", result={}, remote=remote, wake_at=self._clock() + interval)

    def _unreachable(self, call: ToolCallRecord, remote: dict[str, Any], problem: str) -> ToolRun:
        cfg = self._sources.servers.get(call.server or "")
        failures = int(remote.get("failures", 0)) + 1
        budget = cfg.task_poll_failures if cfg else 5
        task_id = str(remote.get("task_id"))
        if failures >= budget:
            return self._lost(
                call, task_id, f"its server could not be reached {failures} times in a row ({problem})"
            )
        logger.info(
            "downstream task %s of call %s: poll failed (%d/%d): %s",
            task_id,
            call.id,
            failures,
            budget,
            problem,
        )
        floor = cfg.task_poll_min_s if cfg else 0.5
        ceiling = cfg.task_poll_max_s if cfg else 60.0
        wake_at = self._clock() + min(floor * BACKOFF**failures, max(ceiling, floor))
        return ToolRun(
            status="waiting_for_task", result={}, remote={**remote, "failures": failures}, wake_at=wake_at
        )

    @staticmethod
    def _lost(call: ToolCallRecord, task_id: str, why: str) -> ToolRun:
        return by_effect(call.effect, f"The downstream task {task_id} of {call.name} was lost: {why}.")
