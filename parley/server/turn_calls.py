"""How a tool call becomes a tool result: the one guard that turns our errors into results, the
caller a handler is given (who, progress, asking the person), and the one path of every tool that
starts or resumes a turn (start_session, send_message, approve, answer_question), including the
retry of a 2026-07-28 input-required round."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from mcp.server.mcpserver import Context
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.types import CallToolResult

from parley.core.records import InterruptRecord
from parley.errors import RequestError, StorageUnavailable
from parley.runtime.access import Principal
from parley.runtime.progress import ProgressFn
from parley.runtime.service import SessionService, TurnOutcome, Waiting
from parley.runtime.session_access import AskHuman
from parley.server.elicitation import (
    answers_from,
    ask_human_through,
    askable,
    can_ask_by_input_required,
    input_required,
    retry_state,
    takes_urls,
)
from parley.server.plan_review import PlanReview
from parley.server.results import error, outcome_result

logger = logging.getLogger(__name__)

# The principal making the request a Context serves (parley/server/auth_gate.py: caller_of).
CallerOf = Callable[[Context], Principal]


async def guarded(tool: str, work: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
    """The one place where our errors become tool results.

    (`work` may also return an InputRequiredResult for a 2026-07-28 client: the SDK passes it
    through to the wire; it is typed as a CallToolResult here so the tools keep their output schema.)"""
    try:
        return await work()
    except RequestError as exc:
        logger.info("tool %s refused: %s", tool, type(exc).__name__)
        return error(str(exc))
    except StorageUnavailable as exc:
        # The file's condition, not a bug: no traceback; the store logged the cause once.
        logger.warning("tool %s failed: the database is %s", tool, exc.condition)
        return error(str(exc))
    except Exception:
        ref = uuid.uuid4().hex[:8]
        logger.exception("tool %s failed (ref %s)", tool, ref)
        return error(
            f"parley hit an internal error (ref {ref}); nothing was changed by this call. Try again."
        )


def progress_of(ctx: Context) -> ProgressFn | None:
    """Progress notifications for this call, or None when the caller asked for none (its request
    has no progress token): a wait then reads no events at all, only what tells it the turn's end.
    (Also None outside a request: a tool called in-process, as MCPServer.call_tool allows.)"""
    try:
        params = ctx.request_context.params
    except ValueError:
        return None
    if progress_token_from_params(params) is None:
        return None

    async def report(progress: float, message: str) -> None:
        await ctx.report_progress(progress, None, message)

    return report


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a tool call, and how its work reaches them while it runs: progress
    notifications, and (turn tools only) questions asked by form elicitation when the client can
    show forms."""

    who: Principal
    progress: ProgressFn | None
    ask_human: AskHuman | None

    def waiting(self, seconds: float | None) -> Waiting:
        """How this caller waits for its turn: at most `seconds`, told and asked as it runs."""
        return Waiting(seconds=seconds, on_progress=self.progress, ask_human=self.ask_human)


TurnStart = Callable[[Caller], Awaitable[TurnOutcome]]
PlainCall = Callable[[Caller], Awaitable[CallToolResult]]


class ToolCalls:
    """The two ways a tool answers: `await calls.plain(name, ctx, run)` for a tool whose result
    its handler makes, and `await calls.turn(name, ctx, wait_seconds, start)` for a tool that
    starts or resumes a turn, `start` being the service call it makes for `Caller`."""

    def __init__(self, service: SessionService, caller_of: CallerOf) -> None:
        self._service = service
        self._caller_of = caller_of
        self._plans = PlanReview(service)

    async def plain(self, tool: str, ctx: Context, run: PlainCall) -> CallToolResult:
        return await guarded(tool, lambda: run(Caller(self._caller_of(ctx), progress_of(ctx), None)))

    async def turn(
        self, tool: str, ctx: Context, wait_seconds: float | None, start: TurnStart
    ) -> CallToolResult:
        async def work() -> CallToolResult:
            caller = Caller(self._caller_of(ctx), progress_of(ctx), ask_human_through(ctx))
            # The retry of an input-required round applies the answers instead of doing `start`
            # again (which would send the message twice).
            resumed, asked = await self._resumed(ctx, caller, wait_seconds)
            if resumed is not None:
                return await self._outcome_or_ask(ctx, caller, resumed, asked)
            # A draft the turn leaves may be put to the person in place (plan_review.py).
            reviewed = await self._plans.after_turn(
                ctx, caller.who, await start(caller), caller.waiting(wait_seconds)
            )
            if not isinstance(reviewed, TurnOutcome):
                return reviewed  # an input-required result that asks the person
            return await self._outcome_or_ask(ctx, caller, reviewed, [])

        return await guarded(tool, work)

    async def _resumed(
        self, ctx: Context, caller: Caller, wait_seconds: float | None
    ) -> tuple[TurnOutcome | None, list[str]]:
        """On the retry of an input-required round: apply the answers and wait again."""
        state = retry_state(ctx) if can_ask_by_input_required(ctx) else None
        if state and state.get("plan_revision") is not None:
            return await self._plans.resumed(ctx, caller.who, state, caller.waiting(wait_seconds)), []
        if not state or not state.get("turn_id"):
            return None, []
        pending = await self._service.reads.pending(caller.who, str(state["session_id"]))
        outcome = await self._service.decisions.resume_with_answers(
            caller.who,
            str(state["session_id"]),
            str(state["turn_id"]),
            answers_from(ctx, pending),
            Waiting(seconds=wait_seconds, on_progress=caller.progress),
        )
        return outcome, [str(i) for i in state.get("asked", [])]

    async def _outcome_or_ask(
        self, ctx: Context, caller: Caller, outcome: TurnOutcome, asked: list[str]
    ) -> CallToolResult:
        """The turn outcome, or, for a 2026-07-28 client that can show forms (and whose person the
        agent takes decisions from), an input-required result asking for the interrupts it was not
        asked about yet in this call."""
        url_mode = takes_urls(ctx.request_context.session)
        fresh = [i for i in outcome.pending if i.id not in asked and askable(i, url_mode)]
        if (
            outcome.status == "waiting_for_input"
            and fresh
            and can_ask_by_input_required(ctx)
            and await self._service.access.may_answer_as_person(caller.who, outcome.session_id)
        ):
            return _input_required(outcome, asked, fresh, url_mode)
        return outcome_result(outcome)


def _input_required(
    outcome: TurnOutcome, asked: list[str], fresh: list[InterruptRecord], url_mode: bool
) -> CallToolResult:
    state = {
        "session_id": outcome.session_id,
        "turn_id": outcome.turn_id,
        "asked": [*asked, *(i.id for i in fresh)],
    }
    return cast(CallToolResult, input_required(outcome.pending, state, url_mode))
