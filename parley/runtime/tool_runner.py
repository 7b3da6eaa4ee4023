"""The tool step of a turn: what can run now runs (concurrently, bounded per process), calls
that need a person, a timer or a downstream task park, and the turn parks when nothing else is
left, so a waiting session holds no task and no lease (docs/design.md#the-tool-step)."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Any

import anyio
from mcp.types import InputResponses
from opentelemetry.trace import Span

from parley.config import AgentConfig
from parley.core.effect_policy import Mishap, judge
from parley.core.ids import TurnId, new_interrupt_id
from parley.core.records import (
    AUTHORIZED,
    InterruptKind,
    InterruptRecord,
    Resolution,
    SessionRecord,
    ToolCallRecord,
)
from parley.core.states import RUNNABLE_CALLS
from parley.runtime.builtin_tools import ToolOutcome, parse_ask_user, parse_durable_wait
from parley.runtime.downstream_questions import DownstreamQuestions
from parley.runtime.mcp.connection import Asker
from parley.runtime.mcp.failures import CallCutByShutdown
from parley.runtime.session_log import about
from parley.runtime.step_context import StepContext, TurnControl
from parley.runtime.tool_run import ToolRun, ended
from parley.runtime.toolbox import Toolbox

logger = logging.getLogger(__name__)

# How much of a failed tool call's text its log line repeats.
LOGGED_RESULT_CHARS = 300
_WAITING_FOR = {
    "question": "an answer to question",
    "approval": "a decision on approval",
    "authorization_required": "the owner to connect an account for",
}
# How long an ending turn waits for the servers to take the cancels of its downstream tasks.
REMOTE_CANCEL_S = 5.0


class ToolRunner:
    """Runs the tool step of turns; one per process (its slots cap concurrent tool calls)."""

    def __init__(self, ctx: StepContext, toolbox: Toolbox) -> None:
        self._ctx = ctx
        self._toolbox = toolbox
        self._tool_slots = anyio.CapacityLimiter(ctx.timings.max_concurrent_tool_calls)
        self._questions = DownstreamQuestions(
            store=ctx.store,
            signals=ctx.signals,
            clock=ctx.clock,
            poll_interval_s=ctx.timings.poll_interval_s,
            public_base=ctx.timings.public_base,
        )

    async def run(
        self,
        session: SessionRecord,
        agent: AgentConfig,
        calls: tuple[ToolCallRecord, ...],
        control: TurnControl,
    ) -> None:
        """Run what can run now; park calls that need a person or a timer, then park the turn
        if nothing else is left, so the process holds no task for a waiting session."""
        now, lease = self._ctx.clock(), control.lease
        runnable: list[ToolCallRecord] = []
        polls: list[ToolCallRecord] = []
        for call in calls:
            if call.status == "pending" and call.requires_approval and call.decision != "approved":
                await self._ask_approval(session, agent, call, lease, now)
            elif call.status == "pending" and call.source == "builtin" and call.name == "ask_user":
                await self._ask_question(session, agent, call, lease, now)
            elif call.status == "pending" and call.source == "builtin" and call.name == "durable_wait":
                await self._start_timer(session, call, lease, now)
            elif call.status == "waiting_for_timer":
                if call.wake_at is not None and call.wake_at <= now:
                    await self._ctx.steps.commit_tool_result(
                        session.id,
                        lease,
                        call.id,
                        "succeeded",
                        {"text": "The wait is over; carry on.", "is_error": False},
                        now,
                    )
            elif call.status == "waiting_for_task":
                if call.wake_at is None or call.wake_at <= now:
                    polls.append(call)
            elif call.status in RUNNABLE_CALLS:
                runnable.append(call)
        async with anyio.create_task_group() as tg:
            for call in runnable:
                tg.start_soon(self._run_tool, session, agent, call, control)
            for call in polls:
                tg.start_soon(self._poll_remote, session, call, control)
        if len(runnable) < len(calls):
            # A call waits for a person, a timer or a task: a wait of the session may be over. (A
            # question a server asks during a runnable call ends with it, or on its own deadline.)
            await self._expire_deadlines(session, self._ctx.clock())
        _, looked = await self._ctx.steps.park_turn(
            session.id, lease, calls[0].turn_id, self._ctx.clock(), control.step_view
        )
        control.seen = control.looked = looked

    async def _ask_approval(
        self, session: SessionRecord, agent: AgentConfig, call: ToolCallRecord, lease: str, now: float
    ) -> None:
        payload = {
            "tool": call.name,
            "server": call.server,
            "arguments": call.arguments,
            "effect": call.effect,
            "question": f"Allow {call.name} ({call.effect}) with these arguments?",
        }
        deadline = now + agent.approval_deadline_s if agent.approval_deadline_s else None
        await self._raise(session, call, lease, "approval", payload, deadline, now)

    async def _ask_question(
        self, session: SessionRecord, agent: AgentConfig, call: ToolCallRecord, lease: str, now: float
    ) -> None:
        parsed = parse_ask_user(call.arguments)
        if isinstance(parsed, ToolOutcome):
            await self._refuse(session, call, lease, parsed, now)
            return
        deadline = now + agent.question_deadline_s if agent.question_deadline_s else None
        await self._raise(session, call, lease, "question", parsed, deadline, now)

    async def _refuse(
        self, session: SessionRecord, call: ToolCallRecord, lease: str, refusal: ToolOutcome, now: float
    ) -> None:
        """A built-in call with unusable arguments fails at once; the model reads why."""
        await self._ctx.steps.commit_tool_result(
            session.id, lease, call.id, "failed", {"text": refusal.text, "is_error": True}, now
        )

    async def _raise(
        self,
        session: SessionRecord,
        call: ToolCallRecord,
        lease: str,
        kind: InterruptKind,
        payload: dict[str, Any],
        deadline: float | None,
        now: float,
        interrupt_id: str | None = None,
    ) -> None:
        interrupt = InterruptRecord(
            id=interrupt_id or new_interrupt_id(),
            session_id=session.id,
            turn_id=call.turn_id,
            tool_call_id=call.id,
            kind=kind,
            status="pending",
            payload=payload,
            created_at=now,
            deadline=deadline,
        )
        await self._ctx.steps.raise_interrupt(session.id, lease, interrupt, now)
        self._ctx.tracing.interrupt_raised(kind, interrupt.id, call.id)
        self._ctx.metrics.interrupts.labels(kind).inc()
        logger.info(
            "session %s: waiting for %s %s on call %s (%s)",
            session.id,
            _WAITING_FOR[kind],
            interrupt.id,
            call.id,
            call.name,
            extra=about(session),
        )
        await self._ctx.faults.hit("interrupt_raised", call.name)

    async def _start_timer(
        self, session: SessionRecord, call: ToolCallRecord, lease: str, now: float
    ) -> None:
        parsed = parse_durable_wait(call.arguments, self._ctx.timings.max_timer_s)
        if isinstance(parsed, ToolOutcome):
            await self._refuse(session, call, lease, parsed, now)
            return
        seconds, _reason = parsed
        await self._ctx.steps.set_timer(session.id, lease, call.id, now + seconds, now)

    async def _expire_deadlines(self, session: SessionRecord, now: float) -> None:
        for interrupt in await self._ctx.store.list_interrupts(session.id, pending_only=True):
            if interrupt.deadline is not None and interrupt.deadline <= now:
                resolution = Resolution(expired=True)
                if interrupt.kind == "authorization_required" and await self._toolbox.connected(
                    session, interrupt.payload.get("server")
                ):
                    # The owner connected after all (the callback's process stopped before it
                    # resolved this, or another link did it): the call goes on instead.
                    resolution = Resolution(answer=AUTHORIZED)
                await self._ctx.steps.resolve_interrupt(session.id, interrupt.id, resolution, "deadline", now)

    async def _run_tool(
        self, session: SessionRecord, agent: AgentConfig, call: ToolCallRecord, control: TurnControl
    ) -> None:
        if call.status == "running":
            # It was under way when a process stopped: it may have had its effect.
            detail = f"The call was interrupted {call.attempts} time(s)."
            verdict = judge(call.effect, Mishap.INTERRUPTED, call.attempts, detail)
            if not verdict.retry:
                assert verdict.ending is not None
                run = ended(verdict)
                await self._ctx.steps.commit_tool_result(
                    session.id, control.lease, call.id, verdict.ending, run.result, self._ctx.clock()
                )
                _log_tool_result(session, call, run)
                return
        await self._ctx.steps.mark_tool_call_started(session.id, control.lease, call.id, self._ctx.clock())

        async def report(progress: float, total: float | None, message: str | None) -> None:
            data = {
                "call_id": call.id,
                "tool": call.name,
                "progress": progress,
                "total": total,
                "message": message,
            }
            await self._ctx.store.record_event(
                session.id, call.turn_id, "tool_progress", data, self._ctx.clock()
            )
            self._ctx.signals.notify(session.id)

        # A started call runs to its end (bounded by its own timeout) even when the turn is
        # cancelled, so its result is kept.
        with anyio.CancelScope(shield=True), self._span(session, call) as span:
            started = anyio.current_time()
            async with self._tool_slots:
                try:
                    run = await self._toolbox.run(
                        call,
                        agent,
                        session,
                        report,
                        self._asker(session, call, control),
                        await self._answers(call),
                    )
                except CallCutByShutdown as exc:
                    # Left running, as a crash leaves it: the next process judges it (reads run again).
                    logger.info(
                        "%s; call %s is left for the next process", exc, call.id, extra=about(session)
                    )
                    return
            await self._ctx.faults.hit("tool_ran", call.name)
            server = call.server or "builtin"
            self._ctx.metrics.tool_seconds.labels(server).observe(anyio.current_time() - started)
            self._ctx.metrics.tool_calls.labels(server, run.status).inc()
            self._ctx.tracing.tool_ended(span, run.status, run.result)
            await self._commit_run(session, call, run, control.lease)

    def _span(self, session: SessionRecord, call: ToolCallRecord) -> AbstractContextManager[Span]:
        return self._ctx.tracing.execute_tool(
            name=call.name,
            call_id=call.id,
            session_id=session.id,
            effect=call.effect,
            server=call.server,
            idempotency_key=call.idempotency_key,
            approved=call.requires_approval and call.decision == "approved",
            arguments=call.arguments,
        )

    async def _poll_remote(self, session: SessionRecord, call: ToolCallRecord, control: TurnControl) -> None:
        """One look at the downstream task of a waiting call (see runtime/mcp/downstream_tasks.py)."""
        with anyio.CancelScope(shield=True), self._span(session, call) as span:
            async with self._tool_slots:
                run = await self._toolbox.poll_remote(
                    call, session, self._asker(session, call, control), await self._answers(call)
                )
            self._ctx.tracing.tool_ended(span, run.status, run.result)
            await self._commit_run(session, call, run, control.lease)

    async def _commit_run(
        self, session: SessionRecord, call: ToolCallRecord, run: ToolRun, lease: str
    ) -> None:
        if run.authorize is not None:
            if run.remote is not None:
                # What the downstream task's record must keep while the owner connects (answers
                # not sent yet, say).
                await self._ctx.steps.wait_remote(
                    session.id, lease, call.id, "waiting_for_task", run.remote, None, self._ctx.clock()
                )
            server = run.authorize_at or call.server or ""
            await self._park_for_authorization(session, call, server, run.authorize, lease)
            return
        if run.status == "awaiting_answer":
            assert run.remote is not None
            wait_s = self._toolbox.input_wait_s(call.server)
            questions = self._questions.retry_questions(session, call, run.remote["forms"], wait_s)
            await self._ctx.steps.ask_remote(
                session.id, lease, call.id, run.remote, questions, self._ctx.clock()
            )
            # A replay asks nobody: its questions are resolved now, and the call goes on.
            if not await self._questions.settle_in_replay(session, call, questions):
                await self._questions.settle_refused(session, questions)
            return
        if run.waits:
            assert run.remote is not None
            await self._ctx.steps.wait_remote(
                session.id,
                lease,
                call.id,
                "waiting_for_task",
                run.remote,
                run.wake_at,
                self._ctx.clock(),
            )
            return
        await self._ctx.steps.commit_tool_result(
            session.id,
            lease,
            call.id,
            run.status,
            run.result,
            self._ctx.clock(),
            todos=run.todos,
        )
        _log_tool_result(session, call, run)

    async def _park_for_authorization(
        self, session: SessionRecord, call: ToolCallRecord, server: str, scopes: tuple[str, ...], lease: str
    ) -> None:
        """Nothing was sent: the call waits for the session's owner to connect their account at `server`."""
        interrupt = await self._toolbox.authorization(session, call, server, scopes)
        now = self._ctx.clock()
        if interrupt is None:
            text = f"This call was not sent: {server} needs an account connected, which parley cannot ask for here."
            await self._ctx.steps.commit_tool_result(
                session.id, lease, call.id, "failed", {"text": text, "is_error": True}, now
            )
            return
        await self._raise(
            session, call, lease, interrupt.kind, interrupt.payload, interrupt.deadline, now, interrupt.id
        )

    async def cancel_remote_tasks(self, session: SessionRecord, turn_id: TurnId) -> None:
        """Ask the servers to cancel the downstream tasks the ending turn still waits on (best
        effort, bounded: the turn ends either way)."""
        waiting = [
            c for c in await self._ctx.store.list_tool_calls(turn_id) if c.status == "waiting_for_task"
        ]
        if not waiting:
            return
        with anyio.move_on_after(REMOTE_CANCEL_S, shield=True):
            async with anyio.create_task_group() as tg:
                for call in waiting:
                    tg.start_soon(self._toolbox.cancel_remote, call, session)

    async def _answers(self, call: ToolCallRecord) -> InputResponses | None:
        """What the user answered to the questions the call's server asked, to send back."""
        if not call.remote or not call.remote.get("forms"):
            return None
        return await self._questions.answers(call)

    def _asker(self, session: SessionRecord, call: ToolCallRecord, control: TurnControl) -> Asker:
        return self._questions.asker(
            session,
            call,
            self._toolbox.input_wait_s(call.server),
            cancelled=lambda: call.turn_id in control.cancelled or self._ctx.stopping,
            lease=control.lease,
        )


def _log_tool_result(session: SessionRecord, call: ToolCallRecord, run: ToolRun) -> None:
    """A line for the session's owner: a failed call at warning (with the start of what the
    tool said), a successful one at debug."""
    text = str((run.result or {}).get("text") or "")
    if run.status == "succeeded":
        logger.debug(
            "session %s: tool call %s (%s) succeeded",
            session.id,
            call.id,
            call.name,
            extra={**about(session), "turn_id": call.turn_id, "tool_call_id": call.id},
        )
        return
    logger.warning(
        "session %s: tool call %s (%s) %s: %s",
        session.id,
        call.id,
        call.name,
        run.status.replace("_", " "),
        text[:LOGGED_RESULT_CHARS],
        extra={**about(session), "turn_id": call.turn_id, "tool_call_id": call.id},
    )
