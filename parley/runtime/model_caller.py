"""The model step of a turn: the model is shown the transcript as its memory mode says (whole,
compacted when it would overflow the context window, a window of the latest messages, or the
turn alone), its call is retried on transient failures with a capped back-off, its
streamed text goes out as events, and its answer and the calls it asks for are committed as one
step (docs/design.md#the-model-step)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

import anyio
from opentelemetry.trace import Span

from parley.config import AgentConfig, ModelSpec, effective_memory
from parley.core.changes import SessionSnapshot
from parley.core.ids import SessionId, TurnId, new_tool_call_id
from parley.core.machine import SET_RESULT_NAME, CallModel, FinishTurn
from parley.core.plans import plan_context, planning_refusal
from parley.core.records import MessageRecord, ModelStep, NewToolCall, SessionRecord, SettledCall, TurnRecord
from parley.core.replays import ReplayBook
from parley.core.transitions import TurnEnd
from parley.errors import ModelError
from parley.runtime import compaction
from parley.runtime.attachments import AttachmentBytes, with_attachment_data
from parley.runtime.builtin_tools import WRITE_TODOS
from parley.runtime.leased_transcript import LeasedTranscript
from parley.runtime.model import ChatMessage, ModelClient, ModelRequest, ModelResponse, ToolSpec
from parley.runtime.offer import Offer
from parley.runtime.session_log import about
from parley.runtime.step_context import StepContext, TurnControl
from parley.runtime.toolbox import Toolbox, caller_of, enabled_tools
from parley.runtime.transcript import assistant_content, latest_messages, to_chat_messages

logger = logging.getLogger(__name__)

# The client that calls a model as its spec says (provider, address, key), from the composition root.
ModelFor = Callable[[ModelSpec], ModelClient]

# The longest pause between two attempts of a model call.
MAX_MODEL_BACKOFF_S = 60.0

# Streamed text reaches waiting callers in pieces of about this age or size.
TEXT_FLUSH_S = 0.25
TEXT_FLUSH_CHARS = 400


class _TextStream:
    """Collects a model call's streamed text and reasoning into `text_delta` and `reasoning_delta`
    events (progress for callers, live views). An attempt that fails after some of it went out
    is followed by an `attempt_discarded` event, so a viewer drops what that attempt showed."""

    def __init__(
        self,
        ctx: StepContext,
        session_id: SessionId,
        turn_id: TurnId,
    ) -> None:
        self._ctx, self._session_id, self._turn_id = ctx, session_id, turn_id
        # (event kind, piece) in arrival order: text and reasoning interleave as the model sends them.
        self._pending: list[tuple[str, str]] = []
        # Pieces go out in batches of about TEXT_FLUSH_S: the first once the call has taken that
        # long (a model that answers at once commits its whole text with the step instead: an
        # event, a transaction and a sync fewer per call).
        self._last = anyio.current_time()
        self._text_published = False
        self._attempt_published = False

    async def add(self, text: str) -> None:
        await self._add("text_delta", text)

    async def add_reasoning(self, text: str) -> None:
        await self._add("reasoning_delta", text)

    async def _add(self, kind: str, text: str) -> None:
        self._pending.append((kind, text))
        if (
            anyio.current_time() - self._last >= TEXT_FLUSH_S
            or sum(len(piece) for _, piece in self._pending) >= TEXT_FLUSH_CHARS
        ):
            await self.flush()

    def tail(self) -> str:
        """The text not published yet, to commit with the model step; nothing when no piece of text
        went out (the step's own event carries the whole text then)."""
        text = "".join(piece for kind, piece in self._pending if kind == "text_delta")
        self._pending = [(kind, piece) for kind, piece in self._pending if kind != "text_delta"]
        return text if self._text_published else ""

    async def flush_reasoning(self) -> None:
        """Publish reasoning still held (the model step's own event carries only its text)."""
        reasoning = "".join(piece for kind, piece in self._pending if kind == "reasoning_delta")
        if not reasoning:
            return
        self._pending = [(kind, piece) for kind, piece in self._pending if kind != "reasoning_delta"]
        ctx = self._ctx
        await ctx.store.record_event(
            self._session_id, self._turn_id, "reasoning_delta", {"text": reasoning}, ctx.clock()
        )
        ctx.signals.notify(self._session_id)

    async def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending, self._last = self._pending, [], anyio.current_time()
        # Consecutive pieces of one kind become one event.
        batches: list[tuple[str, list[str]]] = []
        for kind, piece in pending:
            if batches and batches[-1][0] == kind:
                batches[-1][1].append(piece)
            else:
                batches.append((kind, [piece]))
        ctx = self._ctx
        for kind, pieces in batches:
            await ctx.store.record_event(
                self._session_id, self._turn_id, kind, {"text": "".join(pieces)}, ctx.clock()
            )
            self._text_published = self._text_published or kind == "text_delta"
        self._attempt_published = True
        ctx.signals.notify(self._session_id)

    async def discard_attempt(self, attempt: int, error: str) -> None:
        """The attempt failed: what it streamed and has not gone out is dropped; what went out is
        followed by `attempt_discarded` (the next attempt starts over, in a new text part)."""
        self._pending = []
        if not self._attempt_published:
            return
        self._attempt_published = False
        self._text_published = False
        ctx = self._ctx
        await ctx.store.record_event(
            self._session_id,
            self._turn_id,
            "attempt_discarded",
            {"attempt": attempt, "error": error},
            ctx.clock(),
        )
        ctx.signals.notify(self._session_id)


# Summaries that failed or did not help within one turn before compaction stops trying for it.
MAX_COMPACTION_FAILURES = 2


class _ModelView:
    """What the model is shown for one call, by the turn's memory mode: full (the latest summary,
    if any, plus the messages after it), compaction (the same, compacting first when the prompt
    would overflow the context window), window (the latest messages) or none (the turn's own)."""

    def __init__(
        self,
        caller: ModelCaller,
        session: SessionRecord,
        agent: AgentConfig,
        turn: TurnRecord,
        model: ModelClient,
        spec: ModelSpec,
        tools: tuple[ToolSpec, ...],
        lease: str,
        transcript: LeasedTranscript,
    ) -> None:
        self._caller, self._session, self._agent, self._turn = caller, session, agent, turn
        self._lease, self._transcript = lease, transcript
        self._model, self._spec, self._tools = model, spec, tools
        # The turn's own copy of the settings decides, also after a restart.
        self._memory = effective_memory(agent, turn.settings)

    @property
    def agent(self) -> AgentConfig:
        return self._agent

    @property
    def turn(self) -> TurnRecord:
        return self._turn

    @property
    def can_compact(self) -> bool:
        """A window or a turn alone is what the model sees by design: nothing there to summarize."""
        return self._memory.mode in ("full", "compaction")

    async def messages(self, records: list[MessageRecord], force: bool = False) -> tuple[ChatMessage, ...]:
        memo = self._transcript.chat_memo
        if self._memory.mode == "none":
            return to_chat_messages([r for r in records if r.turn_id == self._turn.id], memo)
        if self._memory.mode == "window":
            return latest_messages(to_chat_messages(records, memo), self._memory.messages)
        summary = await self._transcript.latest_summary()
        chat = self._assemble(records, summary)
        config = self._agent.compaction
        if not (self._memory.mode == "compaction" or force):
            return chat
        window = compaction.context_window(self._spec.name, config)
        failures = self._caller._compaction_failures.get(self._turn.id, 0)
        prompt = compaction.estimate_tokens(chat, self._agent.instructions, self._tools)
        if force and window is None:
            window = prompt  # the provider refused this prompt: aim well below it
        if window is None or failures >= MAX_COMPACTION_FAILURES:
            return chat
        visible = [r for r in records if summary is None or r.seq > summary[0]]
        turn_start = min((r.seq for r in records if r.turn_id == self._turn.id), default=records[-1].seq)
        plan = compaction.plan(visible, prompt, window, config, turn_start, force=force)
        if plan is None:
            return chat
        new_summary = await self._summarize(plan, summary)
        if new_summary is None:
            self._caller._compaction_failures[self._turn.id] = failures + 1
            return chat
        await self._caller._ctx.faults.hit("compacting", self._session.id)
        await self._transcript.save_summary(
            self._lease, self._turn.id, plan.upto_seq, new_summary, self._caller._ctx.clock()
        )
        return self._assemble(records, (plan.upto_seq, new_summary))

    def _assemble(
        self, records: list[MessageRecord], summary: tuple[int, str] | None
    ) -> tuple[ChatMessage, ...]:
        memo = self._transcript.chat_memo
        if summary is None:
            return to_chat_messages(records, memo)
        rest = to_chat_messages([r for r in records if r.seq > summary[0]], memo)
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
                # Attachments go to the summarizer as they went to the model: it puts them in words.
                *await with_attachment_data(to_chat_messages(plan.prefix), self._caller.attachment_bytes),
                ChatMessage(role="user", text=compaction.SUMMARY_REQUEST),
            ),
            tools=(),
            options=dict(self._spec.options),
        )
        session_id, turn_id, now = self._session.id, self._turn.id, self._caller._ctx.clock()
        try:
            with self._caller._ctx.tracing.compaction(session_id=session_id, model=self._spec.name):
                response = await self._caller.complete(
                    self._model, request, self._session, turn_id, provider=self._spec.provider
                )
        except ModelError as exc:
            await self._caller._ctx.store.record_event(
                session_id, turn_id, "compaction_failed", {"error": str(exc)}, now
            )
            return None
        prefix_tokens = compaction.estimate_tokens(to_chat_messages(plan.prefix))
        if not compaction.is_helpful(response.text, prefix_tokens):
            await self._caller._ctx.store.record_event(
                session_id,
                turn_id,
                "compaction_failed",
                {"error": "the summary was empty or not shorter"},
                now,
            )
            return None
        return response.text


class ModelCaller:
    """Makes the model step of turns; one per process (its slots cap concurrent model calls)."""

    def __init__(
        self,
        ctx: StepContext,
        *,
        models: ModelFor,
        catalog: Mapping[str, ModelSpec],
        toolbox: Toolbox,
    ) -> None:
        self._ctx = ctx
        self._models = models
        self._catalog = dict(catalog)
        self._toolbox = toolbox
        self._compaction_failures: dict[TurnId, int] = {}
        # Attachments' bytes shown to models lately (one copy per process, whatever the session).
        self.attachment_bytes = AttachmentBytes(ctx.store)
        # Process-wide: resuming a thousand sessions at start queues calls instead of stampeding.
        self._model_slots = anyio.CapacityLimiter(ctx.timings.max_concurrent_model_calls)

    async def call(
        self,
        session: SessionRecord,
        agent: AgentConfig,
        turn: TurnRecord,
        action: CallModel,
        transcript: LeasedTranscript,
        control: TurnControl,
        ending: Callable[[FinishTurn], TurnEnd] | None = None,
    ) -> FinishTurn | None:
        """One model step of the turn, on the transcript as the driver last read it. With `ending`
        (what ending the turn with an answer does to its session), a step that answers ends the
        turn in its own transaction when nothing holds the turn back: `control.ended_by_step`
        says so, and the lease is let go there when the session rests (`control.rested`)."""
        turn_id, lease = turn.id, control.lease
        # The turn's own copy of the settings decides the model, also after a restart.
        chosen = turn.settings.get("model")
        model_spec = self._catalog.get(chosen, agent.model) if chosen else agent.model
        model = self._models(model_spec)
        full = await self._offer(session, agent, turn)
        # A planning turn is offered only what may run in it; a call of anything else is refused.
        offer = full.for_planning() if turn.mode == "planning" else full
        tools = tuple(offer.tools)
        if not action.offer_tools:
            # The last call a turn may make must answer; a task session may still hand in its result.
            tools = tuple(t for t in tools if t.name == SET_RESULT_NAME)
        stream = _TextStream(self._ctx, session.id, turn_id)
        view = _ModelView(self, session, agent, turn, model, model_spec, tools, lease, transcript)
        choice = _forced_choice(agent, turn, action, tools)
        try:
            response = await self._respond(
                view, transcript, model, model_spec, tools, session, stream, choice
            )
        except ModelError as exc:
            logger.warning("session %s: the model call failed: %s", session.id, exc, extra=about(session))
            return FinishTurn("failed", None, f"The model call failed: {exc}")
        book = await self._replay_book(session)
        new_calls = _new_calls(response, full, offer if turn.mode == "planning" else None, book)
        # Reasoning still held goes out before the step (the step's event carries only the text).
        await stream.flush_reasoning()
        step = ModelStep(
            turn_id=turn_id,
            step_no=action.step_no,
            assistant=assistant_content(response.text, new_calls, response.provider, response.raw),
            tool_calls=new_calls,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
            cached_tokens=response.cached_tokens,
            streamed_tail=stream.tail(),
        )
        if ending is not None and not new_calls:
            await self._commit_answer(session, step, response.text, ending, control)
        else:
            # Committed in one transaction: the answer, the calls it asked for, and its usage.
            looked = await self._ctx.steps.commit_model_step(
                session.id, lease, step, self._ctx.clock(), control.step_view
            )
            control.seen = control.looked = looked
        await self._ctx.faults.hit("model_committed", response.text)
        return None

    async def _replay_book(self, session: SessionRecord) -> ReplayBook | None:
        """A replay session's record of the original's calls (None: not a replay)."""
        if session.replay_of is None:
            return None
        store = self._ctx.store
        return ReplayBook.of(await store.calls_of(session.replay_of), await store.calls_of(session.id))

    async def _offer(self, session: SessionRecord, agent: AgentConfig, turn: TurnRecord) -> Offer:
        """The tools the turn may call now; a source's warning is logged and recorded."""
        offer = await self._toolbox.offer(agent, session.kind, caller_of(session))
        offer = offer.narrowed(enabled_tools(turn.settings))
        for warning in offer.warnings:
            logger.warning("session %s: %s", session.id, warning, extra=about(session))
            await self._ctx.store.record_event(
                session.id, turn.id, "tool_source_warning", {"text": warning}, self._ctx.clock()
            )
        return offer

    async def _respond(
        self,
        view: _ModelView,
        transcript: LeasedTranscript,
        model: ModelClient,
        model_spec: ModelSpec,
        tools: tuple[ToolSpec, ...],
        session: SessionRecord,
        stream: _TextStream,
        tool_choice: str | None,
    ) -> ModelResponse:
        """The model's response to the transcript; when the provider says the prompt is too long,
        the transcript is compacted and asked once more."""
        messages = transcript.records
        chat = await with_attachment_data(await view.messages(messages), self.attachment_bytes)
        mode = view.turn.mode
        context = plan_context(session, mode)
        instructions = view.agent.instructions
        request = ModelRequest(
            model=model_spec.name,
            instructions=f"{instructions}\n\n{context}"
            if instructions and context
            else instructions or context,
            messages=chat,
            tools=tools,
            tool_choice=tool_choice,
            mode=mode,
            todos=tuple(session.todos),
            options=dict(model_spec.options),
            on_text=stream.add,
            on_reasoning=stream.add_reasoning,
        )
        turn_id = view.turn.id
        try:
            return await self.complete(model, request, session, turn_id, stream, provider=model_spec.provider)
        except ModelError as exc:
            if not exc.context_length or not view.can_compact:
                raise
        chat = await with_attachment_data(await view.messages(messages, force=True), self.attachment_bytes)
        return await self.complete(
            model, replace(request, messages=chat), session, turn_id, stream, provider=model_spec.provider
        )

    async def _commit_answer(
        self,
        session: SessionRecord,
        step: ModelStep,
        text: str,
        ending: Callable[[FinishTurn], TurnEnd],
        control: TurnControl,
    ) -> None:
        """A step that answers, ending its turn in the same transaction when nothing holds the
        turn back (the turn's answer, as the driver's next step would find it: machine.next_action)."""
        end = ending(FinishTurn("answered", text, None))
        await self._ctx.faults.hit("turn_finishing", text)
        with anyio.CancelScope(shield=True):
            control.letting_go = True  # the keeper must not take a lease let go for a lost one
            ended, rested = False, None
            try:
                ended, rested, control.seen = await self._commit(session.id, control.lease, step, end)
            finally:
                control.letting_go = rested is not None
        if ended:
            control.ended_by_step, control.rested = step.turn_id, rested

    async def _commit(
        self, session_id: SessionId, lease: str, step: ModelStep, end: TurnEnd
    ) -> tuple[bool, str | None, SessionSnapshot | None]:
        """The answering step; read back in its transaction when someone here waits on the
        session, to be handed to them with the wake-up (their wait then reads nothing)."""
        steps, now = self._ctx.steps, self._ctx.clock()
        if self._ctx.signals.watched(session_id):
            return await steps.commit_answering_step_and_look(session_id, lease, step, end, now)
        ended, rested = await steps.commit_answering_step(session_id, lease, step, end, now)
        return ended, rested, None

    async def complete(
        self,
        model: ModelClient,
        request: ModelRequest,
        session: SessionRecord,
        turn_id: TurnId,
        stream: _TextStream | None = None,
        *,
        provider: str,
    ) -> ModelResponse:
        """One model step: transient failures are retried as attempts of it, with a capped back-off.
        `stream` (the call's streamed text) learns of each failed attempt, so what it showed is
        discarded before the next attempt streams its own. One `chat` span covers the attempts."""
        tracing, metrics, started = self._ctx.tracing, self._ctx.metrics, anyio.current_time()
        with tracing.chat(
            provider=provider,
            model=request.model,
            session_id=session.id,
            instructions=request.instructions,
            messages=request.messages if tracing.capture_content else None,
        ) as span:
            try:
                response = await self._attempts(model, request, session, turn_id, stream, span)
            except ModelError as exc:
                tracing.failed(span, "context_length" if exc.context_length else type(exc).__name__, str(exc))
                raise
            finally:
                metrics.model_seconds.labels(provider, request.model).observe(anyio.current_time() - started)
            for kind, count in (
                ("input", response.input_tokens),
                ("output", response.output_tokens),
                ("cached", response.cached_tokens),
            ):
                metrics.model_tokens.labels(provider, request.model, kind).inc(count)
            tracing.chat_answered(
                span,
                model=response.model or request.model,
                input_tokens=response.input_tokens,
                output_tokens=response.output_tokens,
                cached_tokens=response.cached_tokens,
                finish_reason=response.finish_reason or ("tool_call" if response.tool_calls else "stop"),
                text=response.text,
                tool_calls=response.tool_calls,
            )
            return response

    async def _attempts(
        self,
        model: ModelClient,
        request: ModelRequest,
        session: SessionRecord,
        turn_id: TurnId,
        stream: _TextStream | None,
        span: Span,
    ) -> ModelResponse:
        attempts = self._ctx.timings.max_model_attempts
        for attempt in range(1, attempts + 1):
            try:
                async with self._model_slots:
                    return await model.complete(request)
            except ModelError as exc:
                if stream is not None:
                    await stream.discard_attempt(attempt, str(exc))
                if not exc.transient or attempt == attempts:
                    if exc.transient:
                        raise ModelError(f"{exc} (gave up after {attempts} attempts)") from exc
                    raise
                pause = exc.retry_after_s or self._ctx.timings.model_retry_backoff_s * 2 ** (attempt - 1)
                pause = min(pause, MAX_MODEL_BACKOFF_S)
                logger.info(
                    "session %s: model call attempt %d failed (%s); retrying in %.1fs",
                    session.id,
                    attempt,
                    exc,
                    pause,
                    extra=about(session),
                )
                self._ctx.tracing.retry(
                    span, attempt, "transient" if exc.retry_after_s is None else "rate_limited", pause
                )
                data = {"attempt": attempt, "error": str(exc), "retry_in_s": pause}
                await self._ctx.store.record_event(
                    session.id, turn_id, "model_retry", data, self._ctx.clock()
                )
                self._ctx.signals.notify(session.id)
                await anyio.sleep(pause)
        raise AssertionError("unreachable")


def refused(name: str) -> SettledCall:
    """A call a planning turn may not make: failed, with why, never run."""
    return SettledCall(status="failed", result={"text": planning_refusal(name), "is_error": True})


def _forced_choice(
    agent: AgentConfig, turn: TurnRecord, action: CallModel, tools: tuple[ToolSpec, ...]
) -> str | None:
    """write_todos, on the first model call of a planning turn of an agent with
    plan_tool_choice: required (and only when it is offered)."""
    if turn.mode != "planning" or agent.plan_tool_choice != "required" or action.step_no > 1:
        return None
    return WRITE_TODOS.name if any(t.name == WRITE_TODOS.name for t in tools) else None


def _new_calls(
    response: ModelResponse, offer: Offer, planning: Offer | None, book: ReplayBook | None
) -> list[NewToolCall]:
    """The calls the response asks for, each naming its server and the server's own tool name, so
    any process can run it later without listing the tools again. In a planning turn (`planning`,
    what it may call), any other call is refused and never runs; in a replay (`book`), a call that
    may change anything is settled from the original's record (core/replays.py)."""
    calls = []
    for i, call in enumerate(response.tool_calls):
        binding = offer.binding(call.name)
        settled = None
        if planning is not None and call.name not in planning.bindings:
            settled = refused(call.name)
        elif book is not None:
            reads = binding.source in ("mcp", "resources") and binding.plans and not binding.requires_approval
            settled = book.settle(call.name, call.arguments, runs=reads)
        calls.append(
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
                settled=settled,
            )
        )
    return calls
