"""The session driver: runs one leased session's turns step by step, committing each step.

The driver holds the session's lease for as long as it works. A keeper task renews the
lease and watches the stored cancel request, so a `cancel_turn` written by any process
stops the turn here. Shutdown is different from cancelling: it leaves the turn as
committed so the next process to take the lease resumes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp.types import InputResponses

from parley.config import AgentConfig, AgentLimits, ModelSpec, effective_limits
from parley.errors import LeaseLost, ModelError
from parley.ids import SessionId, TurnId, new_interrupt_id, new_tool_call_id, new_turn_id
from parley.runtime import compaction
from parley.runtime.builtin_tools import SET_RESULT_NAME, ToolOutcome, parse_ask_user, parse_durable_wait
from parley.runtime.downstream_questions import DownstreamQuestions
from parley.runtime.effect_policy import Mishap, judge
from parley.runtime.faults import FaultPoints
from parley.runtime.machine import CallModel, FinishTurn, Nudge, RunTools, next_action
from parley.runtime.mcp.connection import Asker
from parley.runtime.model import ChatMessage, ModelClient, ModelRequest, ModelResponse, ToolSpec
from parley.runtime.session_log import about
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.runtime.tool_run import ToolRun, ended
from parley.runtime.toolbox import Toolbox
from parley.runtime.transcript import assistant_content, to_chat_messages
from parley.runtime.transitions import TurnEnd
from parley.storage.base import (
    InterruptKind,
    InterruptRecord,
    MessageRecord,
    ModelStep,
    NewToolCall,
    Resolution,
    SessionRecord,
    SessionStatus,
    Store,
    ToolCallRecord,
    TurnRecord,
)

logger = logging.getLogger(__name__)

# How much of a failed tool call's text its log line repeats.
LOGGED_RESULT_CHARS = 300

STEERED = (
    "Steered: a new message arrived, so the turn stopped after the step in progress; calls that "
    "had not run and waits of the turn were cancelled."
)
# Cleanup after a cancel must reach the database even though the task is being cancelled.
PERSIST_GRACE_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverTimings:
    lease_ttl_s: float
    poll_interval_s: float
    max_timer_s: float = 7 * 86_400
    max_model_attempts: int = 3
    model_retry_backoff_s: float = 1.0
    max_concurrent_model_calls: int = 16
    max_concurrent_tool_calls: int = 32
    max_driven_sessions: int = 64


# The longest pause between two attempts of a model call.
MAX_MODEL_BACKOFF_S = 60.0
# How long an ending turn waits for the servers to take the cancels of its downstream tasks.
REMOTE_CANCEL_S = 5.0


# Streamed text reaches waiting callers in pieces of about this age or size.
TEXT_FLUSH_S = 0.25
TEXT_FLUSH_CHARS = 400


class _TextStream:
    """Collects a model call's streamed text into `text_delta` events (progress for callers)."""

    def __init__(
        self,
        store: Store,
        session_id: SessionId,
        turn_id: TurnId,
        clock: Callable[[], float],
        signals: SessionSignals,
    ) -> None:
        self._store, self._session_id, self._turn_id = store, session_id, turn_id
        self._clock, self._signals = clock, signals
        self._pending: list[str] = []
        # The first piece goes out at once (a caller waits for the first sign of an answer);
        # later ones are batched.
        self._last = float("-inf")

    async def add(self, text: str) -> None:
        self._pending.append(text)
        if (
            anyio.current_time() - self._last >= TEXT_FLUSH_S
            or sum(map(len, self._pending)) >= TEXT_FLUSH_CHARS
        ):
            await self.flush()

    async def flush(self) -> None:
        if not self._pending:
            return
        text, self._pending, self._last = "".join(self._pending), [], anyio.current_time()
        await self._store.record_event(
            self._session_id, self._turn_id, "text_delta", {"text": text}, self._clock()
        )
        self._signals.notify(self._session_id)


# Summaries that failed or did not help within one turn before compaction stops trying for it.
MAX_COMPACTION_FAILURES = 2


class _ModelView:
    """What the model is shown for one call: the latest summary plus the messages after it,
    compacting first when the prompt would overflow the context window."""

    def __init__(
        self,
        driver: SessionDriver,
        session: SessionRecord,
        agent: AgentConfig,
        turn: TurnRecord,
        model: ModelClient,
        spec: ModelSpec,
        tools: tuple[ToolSpec, ...],
    ) -> None:
        self._driver, self._session, self._agent, self._turn = driver, session, agent, turn
        self._model, self._spec, self._tools = model, spec, tools

    async def messages(self, records: list[MessageRecord], force: bool = False) -> tuple[ChatMessage, ...]:
        store = self._driver._store
        summary = await store.latest_summary(self._session.id)
        chat = self._assemble(records, summary)
        config = self._agent.compaction
        window = compaction.context_window(self._spec.name, config)
        failures = self._driver._compaction_failures.get(self._turn.id, 0)
        prompt = compaction.estimate_tokens(chat, self._agent.instructions, self._tools)
        if force and window is None:
            window = prompt  # the provider refused this prompt: aim well below it
        if not (config.enabled or force) or window is None or failures >= MAX_COMPACTION_FAILURES:
            return chat
        visible = [r for r in records if summary is None or r.seq > summary[0]]
        turn_start = min((r.seq for r in records if r.turn_id == self._turn.id), default=records[-1].seq)
        plan = compaction.plan(visible, prompt, window, config, turn_start, force=force)
        if plan is None:
            return chat
        new_summary = await self._summarize(plan, summary)
        if new_summary is None:
            self._driver._compaction_failures[self._turn.id] = failures + 1
            return chat
        self._driver._faults.hit("compacting", self._session.id)
        await store.save_summary(
            self._session.id,
            self._driver._process_id,
            self._turn.id,
            plan.upto_seq,
            new_summary,
            self._driver._clock(),
        )
        return self._assemble(records, (plan.upto_seq, new_summary))

    @staticmethod
    def _assemble(records: list[MessageRecord], summary: tuple[int, str] | None) -> tuple[ChatMessage, ...]:
        if summary is None:
            return to_chat_messages(records)
        rest = to_chat_messages([r for r in records if r.seq > summary[0]])
        return (compaction.summary_message(summary[1]), *rest)

    async def _summarize(
        self, plan: compaction.CompactionPlan, previous: tuple[int, str] | None
    ) -> str | None:
        earlier = (compaction.summary_message(previous[1]),) if previous is not None else ()
        request = ModelRequest(
            model=self._spec.name,
            instructions=compaction.COMPACTION_INSTRUCTION,
            messages=(
                *earlier,
                *to_chat_messages(plan.prefix),
                ChatMessage(role="user", text=compaction.SUMMARY_REQUEST),
            ),
            tools=(),
            options=dict(self._spec.options),
        )
        session_id, turn_id, now = self._session.id, self._turn.id, self._driver._clock()
        try:
            response = await self._driver._complete(self._model, request, self._session, turn_id)
        except ModelError as exc:
            await self._driver._store.record_event(
                session_id, turn_id, "compaction_failed", {"error": str(exc)}, now
            )
            return None
        prefix_tokens = compaction.estimate_tokens(to_chat_messages(plan.prefix))
        if not compaction.is_helpful(response.text, prefix_tokens):
            await self._driver._store.record_event(
                session_id,
                turn_id,
                "compaction_failed",
                {"error": "the summary was empty or not shorter"},
                now,
            )
            return None
        return response.text


def _session_limit(limits: AgentLimits, session: SessionRecord, now: float) -> str | None:
    used = session.input_tokens + session.output_tokens
    if limits.max_session_tokens is not None and used >= limits.max_session_tokens:
        return f"the session used {used} model tokens, its limit is {limits.max_session_tokens}"
    if limits.max_session_seconds is not None and now - session.created_at >= limits.max_session_seconds:
        return f"the session reached its wall-time limit of {limits.max_session_seconds:g}s"
    return None


def _is_parked(session: SessionRecord, now: float) -> bool:
    """Waiting for a person, or for a timer that is not due: nothing to drive now."""
    not_due = session.wake_at is None or session.wake_at > now
    if session.status == "waiting_for_input":
        return not_due
    return (
        session.status == "running" and session.phase == "waiting" and session.wake_at is not None and not_due
    )


class _TurnControl:
    """The cancel scope of the step in progress, so the keeper can stop the current turn."""

    def __init__(self) -> None:
        self.turn_id: TurnId | None = None
        self.scope: anyio.CancelScope | None = None
        # Turns whose cancel was requested: work shielded from the scope (a tool call waiting on
        # its server's question) looks here to give up its wait.
        self.cancelled: set[TurnId] = set()

    def cancel(self, turn_id: TurnId) -> None:
        self.cancelled.add(turn_id)
        if self.turn_id == turn_id and self.scope is not None:
            self.scope.cancel()


class SessionDriver:
    """Drives sessions whose lease this process holds. One instance per process."""

    def __init__(
        self,
        *,
        store: Store,
        agents: Mapping[str, AgentConfig],
        models: Mapping[str, ModelClient],
        toolbox: Toolbox,
        signals: SessionSignals,
        faults: FaultPoints | None = None,
        catalog: Mapping[str, ModelSpec] | None = None,
        process_id: str,
        timings: DriverTimings,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._steps = SessionSteps(store)
        self._agents = agents
        self._models = models
        self._toolbox = toolbox
        self._faults = faults or FaultPoints(None)
        self._catalog = dict(catalog or {})
        self._compaction_failures: dict[TurnId, int] = {}
        self._signals = signals
        self._process_id = process_id
        self._timings = timings
        self._clock = clock
        self._stopping = False
        # Process-wide caps: resuming a thousand sessions at start queues work instead of stampeding.
        self._model_slots = anyio.CapacityLimiter(timings.max_concurrent_model_calls)
        self._tool_slots = anyio.CapacityLimiter(timings.max_concurrent_tool_calls)
        self._questions = DownstreamQuestions(
            store=store,
            signals=signals,
            clock=clock,
            process_id=process_id,
            poll_interval_s=timings.poll_interval_s,
        )

    def stop_after_current_step(self) -> None:
        """Shutdown: finish the step in progress, then release the session without starting another."""
        self._stopping = True

    async def drive(self, session_id: SessionId) -> None:
        """Work the session until it rests; the caller has acquired its lease."""
        control = _TurnControl()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._keep_lease, session_id, control, tg)
                await self._work(session_id, control)
                tg.cancel_scope.cancel()
        except* LeaseLost:
            # Another process took over (this one stalled past the lease); nothing was committed here.
            logger.warning("lost the lease of session %s; another process drives it now", session_id)
        finally:
            with anyio.move_on_after(PERSIST_GRACE_S, shield=True):
                await self._store.release_lease(session_id, self._process_id)
                ended = await self._store.get_session(session_id)
                if ended is not None and ended.status in ("closed", "completed", "failed"):
                    self._toolbox.release_session(session_id)  # its per-session MCP connections
            self._signals.notify(session_id)

    async def _keep_lease(self, session_id: SessionId, control: _TurnControl, tg: TaskGroup) -> None:
        """Watch for cancel requests every poll interval (a read), and renew the lease (a write,
        with an fsync) only every third of its time to live: renewing hundreds of leases every
        poll interval would queue the very writes that keep them alive."""
        ttl = self._timings.lease_ttl_s
        renew_every = ttl / 3
        interval = min(self._timings.poll_interval_s, renew_every)
        renewed_at = anyio.current_time()
        while True:
            with anyio.move_on_after(interval):
                await self._signals.cancel_requested(session_id)
            if anyio.current_time() - renewed_at >= renew_every:
                try:
                    session = await self._store.renew_lease(session_id, self._process_id, self._clock(), ttl)
                except LeaseLost:
                    tg.cancel_scope.cancel()
                    raise
                renewed_at = anyio.current_time()
            else:
                found = await self._store.get_session(session_id)
                if found is None or found.lease_owner != self._process_id:
                    tg.cancel_scope.cancel()
                    raise LeaseLost(session_id)
                session = found
            if session.cancel_requested_turn is not None:
                control.cancel(session.cancel_requested_turn)

    async def _work(self, session_id: SessionId, control: _TurnControl) -> None:
        first = True
        while True:
            session = await self._store.get_session(session_id)
            if session is None:
                return
            # A question a server asked during a call that was open in a process that stopped
            # can never reach that call: drop it, so the session does not wait for it.
            if (
                first
                and session.status == "waiting_for_input"
                and await self._steps.drop_questions_in_place(session_id, self._process_id, self._clock())
            ):
                continue
            first = False
            if self._stopping:
                # Shutdown: start nothing new, but a turn whose last step is committed is ended
                # now, so its caller sees the answer without waiting for the next process.
                if session.current_turn_id is not None:
                    await self._step(session, session.current_turn_id, control, only_finish=True)
                    self._signals.notify(session_id)
                return
            if _is_parked(session, self._clock()):
                return  # waiting for input or a timer; the scheduler brings it back
            if session.current_turn_id is None:
                if session.status != "running":
                    return
                turn = await self._steps.start_turn(
                    session_id, self._process_id, new_turn_id(), self._clock()
                )
                if turn is not None:
                    logger.info("session %s: turn %s started", session_id, turn.id, extra=about(session))
                if turn is None and await self._steps.rest_session(
                    session_id, self._process_id, self._clock()
                ):
                    self._signals.notify(session_id)
                    return
                self._signals.notify(session_id)
                continue
            if await self._store.steer_pending(session_id):
                # Steered: end the turn at this step boundary; the next turn takes the steered messages.
                await self._finish(session, session.current_turn_id, FinishTurn("cancelled", None, STEERED))
                self._signals.notify(session_id)
                continue
            await self._step(session, session.current_turn_id, control)
            self._signals.notify(session_id)

    async def _step(
        self, session: SessionRecord, turn_id: TurnId, control: _TurnControl, *, only_finish: bool = False
    ) -> None:
        agent = self._agents.get(session.agent)
        if agent is None:
            await self._finish(
                session,
                turn_id,
                FinishTurn("failed", None, f"agent '{session.agent}' is no longer configured"),
            )
            return
        if session.cancel_requested_turn == turn_id:
            await self._finish(session, turn_id, FinishTurn("cancelled", None, None))
            return
        turn = await self._store.get_turn(turn_id)
        if turn is None:
            return
        messages = await self._store.list_messages(session.id, None, None)
        turn_messages = [m for m in messages if m.turn_id == turn_id]
        calls = await self._store.list_tool_calls(turn_id)
        limits = effective_limits(agent.limits, turn.settings)
        action = next_action(
            turn,
            calls,
            turn_messages,
            limits.max_model_calls_per_turn,
            kind=session.kind,
            max_nudges=limits.max_result_nudges,
        )

        if isinstance(action, FinishTurn):
            self._faults.hit("turn_finishing", action.answer or "")
            await self._finish(session, turn_id, action)
            return
        if only_finish:
            return
        if isinstance(action, Nudge):
            await self._steps.append_nudge(session.id, self._process_id, turn_id, action.text, self._clock())
            return
        if isinstance(action, CallModel):
            exceeded = _session_limit(limits, session, self._clock())
            if exceeded is not None:
                await self._finish(
                    session, turn_id, FinishTurn("failed", None, exceeded), limit_reason=exceeded
                )
                return
        with anyio.CancelScope() as scope:
            control.turn_id, control.scope = turn_id, scope
            try:
                if isinstance(action, CallModel):
                    await self._call_model(session, agent, turn, action, messages)
                elif isinstance(action, RunTools):
                    await self._run_tools(session, agent, action.calls, control)
            finally:
                control.turn_id, control.scope = None, None
        if scope.cancelled_caught:
            await self._finish(session, turn_id, FinishTurn("cancelled", None, None))

    async def _call_model(
        self,
        session: SessionRecord,
        agent: AgentConfig,
        turn: TurnRecord,
        action: CallModel,
        messages: list[MessageRecord],
    ) -> None:
        turn_id = turn.id
        # The turn's own copy of the settings decides the model, also after a restart.
        chosen = turn.settings.get("model")
        model = self._models.get(f"catalog:{chosen}") if chosen else None
        model = model or self._models.get(agent.name) or self._models[agent.model.provider]
        model_spec = self._catalog.get(chosen, agent.model) if chosen else agent.model
        offer = await self._toolbox.offer(agent, session.kind, session.id)
        for warning in offer.warnings:
            logger.warning("session %s: %s", session.id, warning, extra=about(session))
            await self._store.record_event(
                session.id, turn_id, "tool_source_warning", {"text": warning}, self._clock()
            )
        tools = tuple(offer.tools)
        if not action.offer_tools:
            # The last call a turn may make must answer; a task session may still hand in its result.
            tools = tuple(t for t in tools if t.name == SET_RESULT_NAME)
        stream = _TextStream(self._store, session.id, turn_id, self._clock, self._signals)
        view = _ModelView(self, session, agent, turn, model, model_spec, tools)
        try:
            chat = await view.messages(messages)
            request = ModelRequest(
                model=model_spec.name,
                instructions=agent.instructions,
                messages=chat,
                tools=tools,
                options=dict(model_spec.options),
                on_text=stream.add,
            )
            try:
                response = await self._complete(model, request, session, turn_id)
            except ModelError as exc:
                if not exc.context_length:
                    raise
                # The provider says the prompt is too long: compact now and try once more.
                chat = await view.messages(messages, force=True)
                response = await self._complete(model, replace(request, messages=chat), session, turn_id)
            await stream.flush()
        except ModelError as exc:
            logger.warning("session %s: the model call failed: %s", session.id, exc, extra=about(session))
            await self._finish(session, turn_id, FinishTurn("failed", None, f"The model call failed: {exc}"))
            return
        new_calls = []
        for i, call in enumerate(response.tool_calls):
            # A stored call names its server and the server's own tool name, so any process can
            # run it later without listing the tools again.
            binding = offer.binding(call.name)
            new_calls.append(
                NewToolCall(
                    id=new_tool_call_id(),
                    call_index=i,
                    name=call.name,
                    arguments=call.arguments,
                    effect=binding.effect,
                    source=binding.source,
                    server=binding.server,
                    tool=binding.tool,
                    requires_approval=binding.requires_approval,
                )
            )
        step = ModelStep(
            turn_id=turn_id,
            step_no=action.step_no,
            assistant=assistant_content(response.text, new_calls, response.provider, response.raw),
            tool_calls=new_calls,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
            cached_tokens=response.cached_tokens,
        )
        # Committed in one transaction: the answer, the calls it asked for, and its usage.
        await self._steps.commit_model_step(session.id, self._process_id, step, self._clock())
        self._faults.hit("model_committed", response.text)

    async def _complete(
        self, model: ModelClient, request: ModelRequest, session: SessionRecord, turn_id: TurnId
    ) -> ModelResponse:
        """One model step: transient failures are retried as attempts of it, with a capped back-off."""
        attempts = self._timings.max_model_attempts
        for attempt in range(1, attempts + 1):
            try:
                async with self._model_slots:
                    return await model.complete(request)
            except ModelError as exc:
                if not exc.transient or attempt == attempts:
                    if exc.transient:
                        raise ModelError(f"{exc} (gave up after {attempts} attempts)") from exc
                    raise
                pause = exc.retry_after_s or self._timings.model_retry_backoff_s * 2 ** (attempt - 1)
                pause = min(pause, MAX_MODEL_BACKOFF_S)
                logger.info(
                    "session %s: model call attempt %d failed (%s); retrying in %.1fs",
                    session.id,
                    attempt,
                    exc,
                    pause,
                    extra=about(session),
                )
                data = {"attempt": attempt, "error": str(exc), "retry_in_s": pause}
                await self._store.record_event(session.id, turn_id, "model_retry", data, self._clock())
                await anyio.sleep(pause)
        raise AssertionError("unreachable")

    async def _run_tools(
        self,
        session: SessionRecord,
        agent: AgentConfig,
        calls: tuple[ToolCallRecord, ...],
        control: _TurnControl,
    ) -> None:
        """Run what can run now; park calls that need a person or a timer, then park the turn
        if nothing else is left, so the process holds no task for a waiting session."""
        now = self._clock()
        runnable: list[ToolCallRecord] = []
        polls: list[ToolCallRecord] = []
        for call in calls:
            if call.status == "pending" and call.requires_approval and call.decision != "approved":
                await self._ask_approval(session, agent, call, now)
            elif call.status == "pending" and call.source == "builtin" and call.name == "ask_user":
                await self._ask_question(session, agent, call, now)
            elif call.status == "pending" and call.source == "builtin" and call.name == "durable_wait":
                await self._start_timer(session, call, now)
            elif call.status == "waiting_for_timer":
                if call.wake_at is not None and call.wake_at <= now:
                    await self._steps.commit_tool_result(
                        session.id,
                        self._process_id,
                        call.id,
                        "succeeded",
                        {"text": "The wait is over; carry on.", "is_error": False},
                        now,
                    )
            elif call.status == "waiting_for_task":
                if call.wake_at is None or call.wake_at <= now:
                    polls.append(call)
            elif call.status in ("pending", "running"):
                runnable.append(call)
        async with anyio.create_task_group() as tg:
            for call in runnable:
                tg.start_soon(self._run_tool, session, agent, call, control)
            for call in polls:
                tg.start_soon(self._poll_remote, session, call, control)
        await self._expire_deadlines(session, self._clock())
        await self._steps.park_turn(session.id, self._process_id, calls[0].turn_id, self._clock())

    async def _ask_approval(
        self, session: SessionRecord, agent: AgentConfig, call: ToolCallRecord, now: float
    ) -> None:
        payload = {
            "tool": call.name,
            "server": call.server,
            "arguments": call.arguments,
            "effect": call.effect,
            "question": f"Allow {call.name} ({call.effect}) with these arguments?",
        }
        deadline = now + agent.approval_deadline_s if agent.approval_deadline_s else None
        await self._raise(session, call, "approval", payload, deadline, now)

    async def _ask_question(
        self, session: SessionRecord, agent: AgentConfig, call: ToolCallRecord, now: float
    ) -> None:
        parsed = parse_ask_user(call.arguments)
        if isinstance(parsed, ToolOutcome):
            await self._steps.commit_tool_result(
                session.id, self._process_id, call.id, "failed", {"text": parsed.text, "is_error": True}, now
            )
            return
        deadline = now + agent.question_deadline_s if agent.question_deadline_s else None
        await self._raise(session, call, "question", parsed, deadline, now)

    async def _raise(
        self,
        session: SessionRecord,
        call: ToolCallRecord,
        kind: InterruptKind,
        payload: dict[str, Any],
        deadline: float | None,
        now: float,
    ) -> None:
        interrupt = InterruptRecord(
            id=new_interrupt_id(),
            session_id=session.id,
            turn_id=call.turn_id,
            tool_call_id=call.id,
            kind=kind,
            status="pending",
            payload=payload,
            created_at=now,
            deadline=deadline,
        )
        await self._steps.raise_interrupt(session.id, self._process_id, interrupt, now)
        logger.info(
            "session %s: waiting for %s %s on call %s (%s)",
            session.id,
            "an answer to question" if kind == "question" else "a decision on approval",
            interrupt.id,
            call.id,
            call.name,
            extra=about(session),
        )
        self._faults.hit("interrupt_raised", call.name)

    async def _start_timer(self, session: SessionRecord, call: ToolCallRecord, now: float) -> None:
        parsed = parse_durable_wait(call.arguments, self._timings.max_timer_s)
        if isinstance(parsed, ToolOutcome):
            await self._steps.commit_tool_result(
                session.id, self._process_id, call.id, "failed", {"text": parsed.text, "is_error": True}, now
            )
            return
        seconds, _reason = parsed
        await self._steps.set_timer(session.id, self._process_id, call.id, now + seconds, now)

    async def _expire_deadlines(self, session: SessionRecord, now: float) -> None:
        for interrupt in await self._store.list_interrupts(session.id, pending_only=True):
            if interrupt.deadline is not None and interrupt.deadline <= now:
                await self._steps.resolve_interrupt(
                    session.id, interrupt.id, Resolution(expired=True), "deadline", now
                )

    async def _run_tool(
        self, session: SessionRecord, agent: AgentConfig, call: ToolCallRecord, control: _TurnControl
    ) -> None:
        if call.status == "running":
            # It was under way when a process stopped: it may have had its effect.
            detail = f"The call was interrupted {call.attempts} time(s)."
            verdict = judge(call.effect, Mishap.INTERRUPTED, call.attempts, detail)
            if not verdict.retry:
                assert verdict.ending is not None
                run = ended(verdict)
                await self._steps.commit_tool_result(
                    session.id, self._process_id, call.id, verdict.ending, run.result, self._clock()
                )
                _log_tool_result(session, call, run)
                return
        await self._steps.mark_tool_call_started(session.id, self._process_id, call.id, self._clock())

        async def report(progress: float, total: float | None, message: str | None) -> None:
            data = {
                "call_id": call.id,
                "tool": call.name,
                "progress": progress,
                "total": total,
                "message": message,
            }
            await self._store.record_event(session.id, call.turn_id, "tool_progress", data, self._clock())
            self._signals.notify(session.id)

        # A started call runs to its end (bounded by its own timeout) even when the turn is
        # cancelled, so its result is kept.
        with anyio.CancelScope(shield=True):
            async with self._tool_slots:
                run = await self._toolbox.run(
                    call,
                    agent,
                    session,
                    report,
                    self._asker(session, call, control),
                    await self._answers(call),
                )
            self._faults.hit("tool_ran", call.name)
            await self._commit_run(session, call, run)

    async def _poll_remote(self, session: SessionRecord, call: ToolCallRecord, control: _TurnControl) -> None:
        """One look at the downstream task of a waiting call (see runtime/mcp/task_calls.py)."""
        with anyio.CancelScope(shield=True):
            async with self._tool_slots:
                run = await self._toolbox.poll_remote(
                    call, session, self._asker(session, call, control), await self._answers(call)
                )
            await self._commit_run(session, call, run)

    async def _commit_run(self, session: SessionRecord, call: ToolCallRecord, run: ToolRun) -> None:
        if run.status == "awaiting_answer":
            assert run.remote is not None
            wait_s = self._toolbox.input_wait_s(call.server)
            questions = self._questions.retry_questions(session, call, run.remote["forms"], wait_s)
            await self._steps.ask_remote(
                session.id, self._process_id, call.id, run.remote, questions, self._clock()
            )
            return
        if run.waits:
            assert run.remote is not None
            await self._steps.wait_remote(
                session.id,
                self._process_id,
                call.id,
                "waiting_for_task",
                run.remote,
                run.wake_at,
                self._clock(),
            )
            return
        await self._steps.commit_tool_result(
            session.id,
            self._process_id,
            call.id,
            run.status,  # type: ignore[arg-type]
            run.result,
            self._clock(),
            todos=run.todos,
        )
        _log_tool_result(session, call, run)

    async def _cancel_remote_tasks(self, session: SessionRecord, turn_id: TurnId) -> None:
        """Ask the servers to cancel the downstream tasks the ending turn still waits on (best
        effort, bounded: the turn ends either way)."""
        waiting = [c for c in await self._store.list_tool_calls(turn_id) if c.status == "waiting_for_task"]
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

    def _asker(self, session: SessionRecord, call: ToolCallRecord, control: _TurnControl) -> Asker:
        return self._questions.asker(
            session,
            call,
            self._toolbox.input_wait_s(call.server),
            cancelled=lambda: call.turn_id in control.cancelled or self._stopping,
        )

    async def _finish(
        self, session: SessionRecord, turn_id: TurnId, action: FinishTurn, limit_reason: str | None = None
    ) -> None:
        agent = self._agents.get(session.agent)
        if action.status in ("cancelled", "failed"):
            await self._cancel_remote_tasks(session, turn_id)
        close_reason = None
        session_status: SessionStatus | None = None
        if limit_reason is not None and session.kind != "task":
            close_reason = limit_reason  # a session-level limit closes a chat session
        elif session.kind == "task" and action.status == "completed":
            session_status = "completed"
        elif session.kind == "task" and action.status == "failed":
            session_status = "failed"  # in a task session a failed turn fails the session
        elif agent is not None and session.turn_count >= (
            max_turns := effective_limits(agent.limits, session.settings).max_turns
        ):
            close_reason = f"reached the limit of {max_turns} turns per session"
        with anyio.CancelScope(shield=True):
            end = TurnEnd(
                status=action.status,
                answer=action.answer,
                error=action.error,
                result=action.result,
                close_reason=close_reason,
                session_status=session_status,
            )
            await self._steps.finish_turn(session.id, self._process_id, turn_id, end, self._clock())
        ended = f"session %s: turn %s {action.status}" + (": %s" if action.error else "")
        args = (session.id, turn_id, action.error) if action.error else (session.id, turn_id)
        level = logging.WARNING if action.status == "failed" else logging.INFO
        logger.log(level, ended, *args, extra=about(session))


def _log_tool_result(session: SessionRecord, call: ToolCallRecord, run: ToolRun) -> None:
    """A line for the session's owner: a failed call at warning (with the start of what the
    tool said), a successful one at debug."""
    text = str((run.result or {}).get("text") or "")
    if run.status == "succeeded":
        logger.debug(
            "session %s: tool call %s (%s) succeeded", session.id, call.id, call.name, extra=about(session)
        )
        return
    logger.warning(
        "session %s: tool call %s (%s) %s: %s",
        session.id,
        call.id,
        call.name,
        run.status.replace("_", " "),
        text[:LOGGED_RESULT_CHARS],
        extra=about(session),
    )
