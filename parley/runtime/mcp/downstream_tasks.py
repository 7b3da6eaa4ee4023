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

from mcp.types import CallToolResult, InputResponses, Tool
from pydantic import ValidationError

from parley.config import McpServerConfig
from parley.core.records import ToolCallRecord
from parley.runtime.mcp.connection import Asker, Caller
from parley.runtime.mcp.failures import CallMaybeSent, CallNotSent, CallRefused, NeedsAuthorization
from parley.runtime.mcp.remote import CORE_TASKS_VERSION, TASKS_EXTENSION, RemoteTask, TaskHandle
from parley.runtime.mcp.results import convert_result
from parley.runtime.mcp.sources import McpToolSources
from parley.runtime.tool_run import ToolRun, by_effect, failed

logger = logging.getLogger(__name__)

BACKOFF = 1.5


class DownstreamTasks:
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

    async def start(self, call: ToolCallRecord, caller: Caller) -> ToolRun:
        server, tool = call.server or "", call.tool or call.name
        try:
            task = await self._sources.start_task(
                server, tool, call.arguments, caller=caller, idempotency_key=call.idempotency_key
            )
        except CallNotSent as exc:
            return _parked_for(exc) or failed(
                f"The call did not run, so it is safe to call again later: {exc}."
            )
        except CallRefused as exc:
            return failed(str(exc))
        except CallMaybeSent as exc:
            return by_effect(call.effect, f"Starting the task failed: {exc}.")
        return self._wait(call, _task_remote(CORE_TASKS_VERSION, task), task)

    def adopt(self, call: ToolCallRecord, handle: TaskHandle) -> ToolRun:
        """A 2026-07-28 server chose to run the call as a task: wait for it like for our own."""
        task = handle.as_remote_task()
        return self._wait(call, _task_remote(TASKS_EXTENSION, task), task)

    async def send_answers(self, call: ToolCallRecord, caller: Caller, answers: InputResponses) -> ToolRun:
        """Send the user's answers to a 2026-07-28 task's input requests, then keep polling."""
        remote = dict(call.remote or {})
        task_id = str(remote.get("task_id"))
        wire = {k: v.model_dump(by_alias=True, mode="json", exclude_none=True) for k, v in answers.items()}
        try:
            await self._sources.update_task(call.server or "", caller, task_id, wire)
        except CallRefused as exc:
            return self._lost(call, task_id, f"it did not take the answers ({exc})")
        except (CallNotSent, CallMaybeSent) as exc:
            # Sent again by a later poll that still finds the task waiting for them.
            unsent = {**remote, "unsent": True}
            return _parked_for(exc, unsent) or self._unreachable(call, unsent, str(exc))
        remote = {k: v for k, v in remote.items() if k not in ("forms", "unsent")}
        remote["polls"] = 0  # fresh progress is likely: poll at the short interval again
        return ToolRun(status="waiting_for_task", result={}, remote=remote, wake_at=self._clock())

    async def poll(
        self, call: ToolCallRecord, caller: Caller, on_input: Asker | None, answers: InputResponses | None
    ) -> ToolRun:
        """Look at the task once; fetch its result when it has ended or needs input. `answers`:
        the user's answers to the task's input requests, when sending them failed before."""
        remote = dict(call.remote or {})
        if remote.get("generation") == TASKS_EXTENSION:
            return await self._poll_modern(call, caller, remote, answers)
        server, task_id = call.server or "", str(remote.get("task_id"))
        try:
            task = await self._sources.get_task(server, caller, task_id)
        except CallRefused as exc:
            return self._lost(call, task_id, f"the server no longer knows it ({exc})")
        except (CallNotSent, CallMaybeSent) as exc:
            return _parked_for(exc) or self._unreachable(call, remote, str(exc))
        if task.status == "working":
            return self._wait(call, remote, task)
        if task.status == "cancelled":
            return by_effect(
                call.effect,
                f"The server cancelled task {task_id} ({task.status_message or 'no reason given'}).",
            )
        # completed, failed, or input_required: tasks/result answers (asking for input first).
        try:
            result = await self._sources.task_result(server, caller, task_id, on_input)
        except CallRefused as exc:
            return self._lost(call, task_id, f"its result could not be fetched ({exc})")
        except (CallNotSent, CallMaybeSent) as exc:
            return _parked_for(exc) or self._unreachable(call, remote, str(exc))
        if result is None:
            return self._wait(call, remote, task)  # still running: look again later
        cfg = self._sources.servers.get(server)
        stored = convert_result(result, cfg.max_result_chars if cfg else 20_000)
        return ToolRun(status="failed" if stored["is_error"] else "succeeded", result=stored)

    async def _poll_modern(
        self, call: ToolCallRecord, caller: Caller, remote: dict[str, Any], answers: InputResponses | None
    ) -> ToolRun:
        server, task_id = call.server or "", str(remote.get("task_id"))
        try:
            task = await self._sources.get_task_modern(server, caller, task_id)
        except CallRefused as exc:
            return self._lost(call, task_id, f"the server no longer knows it ({exc})")
        except (CallNotSent, CallMaybeSent) as exc:
            return _parked_for(exc) or self._unreachable(call, remote, str(exc))
        status = str(task.get("status"))
        handle = RemoteTask.from_wire(task, modern=True)
        if status == "completed":
            cfg = self._sources.servers.get(server)
            try:
                result = CallToolResult.model_validate(task.get("result") or {})
            except ValidationError:
                return by_effect(call.effect, f"Task {task_id} ended with a result parley cannot read.")
            stored = convert_result(result, cfg.max_result_chars if cfg else 20_000)
            return ToolRun(status="failed" if stored["is_error"] else "succeeded", result=stored)
        if status == "failed":
            error = task.get("error") or {}
            return failed(
                f"Task {task_id} failed at {server}: {error.get('message') or handle.status_message or 'no reason given'}."
            )
        if status == "cancelled":
            return by_effect(
                call.effect,
                f"The server cancelled task {task_id} ({handle.status_message or 'no reason given'}).",
            )
        if status == "input_required":
            asked = set(remote.get("asked") or [])
            fresh = {k: v for k, v in (task.get("inputRequests") or {}).items() if k not in asked}
            forms, other = _forms(fresh)
            if other:
                return by_effect(
                    call.effect,
                    f"{server} asked for {', '.join(sorted(other))} to go on with task {task_id}, which parley does not provide.",
                )
            if forms:
                remote = {**remote, "asked": sorted(asked | set(forms)), "forms": forms}
                return ToolRun(status="awaiting_answer", result={}, remote=remote)
            if remote.get("unsent") and answers:
                return await self.send_answers(call, caller, answers)
        return self._wait(call, remote, handle)

    async def cancel(self, call: ToolCallRecord, caller: Caller) -> None:
        """Ask the server to cancel the task (best effort: the turn ends either way)."""
        remote = call.remote or {}
        task_id = remote.get("task_id")
        if not task_id or not call.server:
            return
        try:
            generation = str(remote.get("generation") or CORE_TASKS_VERSION)
            await self._sources.cancel_task(call.server, caller, str(task_id), generation)
        except Exception as exc:
            logger.info("could not cancel downstream task %s of call %s: %s", task_id, call.id, exc)

    def _wait(self, call: ToolCallRecord, remote: dict[str, Any], task: RemoteTask) -> ToolRun:
        polls = int(remote.get("polls", 0))
        interval = self._backoff(call, polls, task.poll_interval_s)
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
        wake_at = self._clock() + self._backoff(call, failures, None)
        return ToolRun(
            status="waiting_for_task", result={}, remote={**remote, "failures": failures}, wake_at=wake_at
        )

    def _backoff(self, call: ToolCallRecord, times: int, server_interval_s: float | None) -> float:
        """The pause before the next poll: the server's interval (at least task_poll_min_s),
        x1.5 for each poll (or failure) so far, at most task_poll_max_s."""
        cfg = self._sources.servers.get(call.server or "")
        floor = max(cfg.task_poll_min_s if cfg else 0.5, server_interval_s or 0.0)
        ceiling = max(cfg.task_poll_max_s if cfg else 60.0, floor)
        return float(min(floor * BACKOFF ** min(times, 50), ceiling))

    @staticmethod
    def _lost(call: ToolCallRecord, task_id: str, why: str) -> ToolRun:
        return by_effect(call.effect, f"The downstream task {task_id} of {call.name} was lost: {why}.")


def _task_remote(generation: str, task: RemoteTask) -> dict[str, Any]:
    return {
        "kind": "task",
        "generation": generation,
        "task_id": task.task_id,
        "polls": 0,
        "failures": 0,
        "server_interval_s": task.poll_interval_s,
    }


def _forms(requests: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Form elicitations among a task's input requests (the only kind parley answers), and the
    methods of the others."""
    forms: dict[str, Any] = {}
    other: set[str] = set()
    for key, request in requests.items():
        params = request.get("params") if isinstance(request, dict) else None
        if (
            isinstance(request, dict)
            and request.get("method") == "elicitation/create"
            and isinstance(params, dict)
            and params.get("mode", "form") == "form"
        ):
            forms[key] = params
        else:
            other.add(str(request.get("method")) if isinstance(request, dict) else "an unknown request")
    return forms, other


def _parked_for(exc: Exception, remote: dict[str, Any] | None = None) -> ToolRun | None:
    """A look at (or the start of) a task that the owner's missing token kept from its server:
    the call parks until they connect, then the task is looked at again (or started); `remote`:
    what the task's record must say meanwhile. None: not that, the caller handles the failure."""
    if not isinstance(exc, NeedsAuthorization) or exc.principal is None:
        return None
    return ToolRun(
        status="awaiting_answer", result={}, remote=remote, authorize=exc.scopes, authorize_at=exc.server
    )
