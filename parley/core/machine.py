"""What a turn does next, decided from its stored state alone.

No I/O here: the driver loads the state, asks `next_action`, performs the action and
commits it. Because the decision depends only on what is committed, the same function
resumes a turn after a crash: a model call whose result was never committed is simply
made again, a tool call that never started is started. The rules in order:
docs/design.md#the-machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parley.core.records import MessageRecord, ToolCallRecord, TurnRecord, TurnStatus

# The built-in tool a task session ends with (parley/runtime/builtin_tools.py offers it).
SET_RESULT_NAME = "set_result"


@dataclass(frozen=True, slots=True)
class CallModel:
    step_no: int
    offer_tools: bool


@dataclass(frozen=True, slots=True)
class RunTools:
    calls: tuple[ToolCallRecord, ...]


@dataclass(frozen=True, slots=True)
class FinishTurn:
    status: TurnStatus
    answer: str | None
    error: str | None
    result: Any = None


@dataclass(frozen=True, slots=True)
class Nudge:
    """A task turn answered without a result: remind the model to call set_result."""

    text: str


Action = CallModel | RunTools | FinishTurn | Nudge

NUDGE_TEXT = (
    "This is a task session: it ends only when you call the set_result tool with the task's result. "
    "Call set_result now."
)


def model_call_limit_reason(limit: int) -> str:
    return (
        f"The turn reached its limit of {limit} model call(s) and the last response still asked for "
        "tools, which were not run. Send another message to continue."
    )


def no_result_reason(nudges: int) -> str:
    return f"The task ended without a result: the model did not call set_result, even after {nudges} reminder(s)."


def next_action(
    turn: TurnRecord,
    calls: Sequence[ToolCallRecord],
    messages: Sequence[MessageRecord],
    max_model_calls: int,
    *,
    kind: str = "chat",
    max_nudges: int = 2,
) -> Action:
    """The next step of a running turn.

    `messages` are the turn's own messages in order; `calls` its tool calls.
    """
    last_assistant = next((m for m in reversed(messages) if m.role == "assistant"), None)
    last_is_assistant = bool(messages) and messages[-1].role == "assistant"
    unfinished = tuple(c for c in calls if not c.is_final)
    text = str(last_assistant.content.get("text", "")) if last_assistant is not None else ""

    accepted = next((c for c in calls if c.name == SET_RESULT_NAME and c.status == "succeeded"), None)
    if accepted is not None and not unfinished:
        return FinishTurn(status="completed", answer=text or None, error=None, result=accepted.arguments)
    if last_assistant is not None and not last_assistant.content.get("tool_calls") and last_is_assistant:
        if kind != "task":
            return FinishTurn(status="answered", answer=text, error=None)
        nudges = sum(1 for m in messages if m.content.get("nudge"))
        if nudges < max_nudges and turn.model_calls < max_model_calls:
            return Nudge(text=NUDGE_TEXT)
        return FinishTurn(status="failed", answer=text or None, error=no_result_reason(nudges))
    if unfinished:
        if turn.model_calls >= max_model_calls:
            return FinishTurn(
                status="failed", answer=text or None, error=model_call_limit_reason(max_model_calls)
            )
        return RunTools(calls=unfinished)
    step_no = turn.model_calls + 1
    if step_no > max_model_calls:
        reason = f"The turn used all {max_model_calls} model call(s) it may make without an accepted result."
        return FinishTurn(status="failed", answer=text or None, error=reason)
    return CallModel(step_no=step_no, offer_tools=step_no < max_model_calls)
