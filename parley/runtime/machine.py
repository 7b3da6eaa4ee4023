"""What a turn does next, decided from its stored state alone.

No I/O here: the driver loads the state, asks `next_action`, performs the action and
commits it. Because the decision depends only on what is committed, the same function
resumes a turn after a crash: a model call whose result was never committed is simply
made again, a tool call that never started is started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parley.storage.base import MessageRecord, ToolCallRecord, TurnRecord, TurnStatus


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


Action = CallModel | RunTools | FinishTurn


def model_call_limit_reason(limit: int) -> str:
    return (
        f"The turn reached its limit of {limit} model call(s) and the last response still asked for "
        "tools, which were not run. Send another message to continue."
    )


def next_action(
    turn: TurnRecord, calls: Sequence[ToolCallRecord], messages: Sequence[MessageRecord], max_model_calls: int
) -> Action:
    """The next step of a running turn.

    `messages` are the turn's own messages in order; `calls` its tool calls.
    """
    last_assistant = next((m for m in reversed(messages) if m.role == "assistant"), None)
    last_is_assistant = bool(messages) and messages[-1].role == "assistant"
    unfinished = tuple(c for c in calls if not c.is_final)

    if last_assistant is not None and not last_assistant.content.get("tool_calls") and last_is_assistant:
        return FinishTurn(status="answered", answer=str(last_assistant.content.get("text", "")), error=None)
    if unfinished:
        if turn.model_calls >= max_model_calls:
            text = str(last_assistant.content.get("text", "")) if last_assistant else None
            return FinishTurn(
                status="failed", answer=text or None, error=model_call_limit_reason(max_model_calls)
            )
        return RunTools(calls=unfinished)
    step_no = turn.model_calls + 1
    return CallModel(step_no=step_no, offer_tools=step_no < max_model_calls)
