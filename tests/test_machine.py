"""The turn state machine: what a turn does next, decided from its stored state alone."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from parley.core.ids import QueuedMessageId, SessionId, ToolCallId, TurnId
from parley.core.machine import (
    NUDGE_TEXT,
    Action,
    CallModel,
    FinishTurn,
    Nudge,
    RunTools,
    model_call_limit_reason,
    next_action,
    no_result_reason,
)
from parley.core.records import MessageRecord, Role, ToolCallRecord, ToolCallStatus, TurnRecord

SID = SessionId("ses_" + "0" * 32)
TID = TurnId("turn_1")


def turn(model_calls: int) -> TurnRecord:
    return TurnRecord(
        id=TID,
        session_id=SID,
        seq=1,
        status="running",
        queued_message_id=QueuedMessageId("qm_1"),
        started_at=1.0,
        ended_at=None,
        answer=None,
        error=None,
        model_calls=model_calls,
        input_tokens=0,
        output_tokens=0,
    )


def call(call_id: str, status: ToolCallStatus, step_no: int = 1, index: int = 0) -> ToolCallRecord:
    return ToolCallRecord(
        id=ToolCallId(call_id),
        session_id=SID,
        turn_id=TID,
        step_no=step_no,
        call_index=index,
        name="write_todos",
        arguments={},
        status=status,
        effect="idempotent_write",
        result=None,
        attempts=0,
        idempotency_key=f"{SID}/{TID}/{call_id}",
        created_at=1.0,
        updated_at=1.0,
    )


def _messages(*specs: tuple[Role, dict[str, Any]]) -> list[MessageRecord]:
    return [
        MessageRecord(session_id=SID, seq=i, turn_id=TID, role=role, content=content, created_at=1.0)
        for i, (role, content) in enumerate(specs, start=1)
    ]


def user(text: str = "hi") -> tuple[Role, dict[str, Any]]:
    return ("user", {"text": text})


def assistant(text: str, *call_ids: str) -> tuple[Role, dict[str, Any]]:
    content: dict[str, Any] = {"text": text}
    if call_ids:
        content["tool_calls"] = [{"id": c, "name": "write_todos", "arguments": {}} for c in call_ids]
    return ("assistant", content)


def tool(call_id: str) -> tuple[Role, dict[str, Any]]:
    return ("tool", {"tool_call_id": call_id, "text": "ok"})


def nudge() -> tuple[Role, dict[str, Any]]:
    return ("user", {"text": NUDGE_TEXT, "nudge": True})


def set_result(call_id: str, status: ToolCallStatus, arguments: dict[str, Any]) -> ToolCallRecord:
    return replace(call(call_id, status), name="set_result", arguments=arguments)


@dataclass(frozen=True)
class Case:
    name: str
    turn: TurnRecord
    calls: list[ToolCallRecord]
    messages: list[MessageRecord]
    max_calls: int
    expected: Action
    kind: str = "chat"


LIMIT_2 = model_call_limit_reason(2)

CASES = [
    Case(
        "a new turn calls the model with tools",
        turn(0),
        [],
        _messages(user()),
        8,
        CallModel(step_no=1, offer_tools=True),
    ),
    Case(
        "a turn allowed one model call offers no tools on it",
        turn(0),
        [],
        _messages(user()),
        1,
        CallModel(step_no=1, offer_tools=False),
    ),
    Case(
        "an answer without tool calls finishes the turn answered",
        turn(1),
        [],
        _messages(user(), assistant("the answer")),
        8,
        FinishTurn(status="answered", answer="the answer", error=None),
    ),
    Case(
        "an empty answer still finishes the turn",
        turn(1),
        [],
        _messages(user(), assistant("")),
        8,
        FinishTurn(status="answered", answer="", error=None),
    ),
    Case(
        "an answer after tool results finishes the turn",
        turn(2),
        [call("c1", "succeeded")],
        _messages(user(), assistant("calling", "c1"), tool("c1"), assistant("done")),
        8,
        FinishTurn(status="answered", answer="done", error=None),
    ),
    Case(
        "requested calls are run",
        turn(1),
        [call("c1", "pending"), call("c2", "pending", index=1)],
        _messages(user(), assistant("calling", "c1", "c2")),
        8,
        RunTools(calls=(call("c1", "pending"), call("c2", "pending", index=1))),
    ),
    Case(
        "only the calls without a final result are run",
        turn(1),
        [call("c1", "succeeded"), call("c2", "pending", index=1), call("c3", "failed", index=2)],
        _messages(user(), assistant("calling", "c1", "c2", "c3"), tool("c1"), tool("c3")),
        8,
        RunTools(calls=(call("c2", "pending", index=1),)),
    ),
    Case(
        "a call left running by a crash is handed back to the runner",
        turn(1),
        [call("c1", "running")],
        _messages(user(), assistant("calling", "c1")),
        8,
        RunTools(calls=(call("c1", "running"),)),
    ),
    Case(
        "when every call has a result the model is called again with tools",
        turn(1),
        [call("c1", "succeeded"), call("c2", "failed", index=1)],
        _messages(user(), assistant("calling", "c1", "c2"), tool("c1"), tool("c2")),
        8,
        CallModel(step_no=2, offer_tools=True),
    ),
    Case(
        "the last allowed model call is offered no tools",
        turn(1),
        [call("c1", "succeeded")],
        _messages(user(), assistant("calling", "c1"), tool("c1")),
        2,
        CallModel(step_no=2, offer_tools=False),
    ),
    Case(
        "cancelled and unknown-outcome calls count as final",
        turn(1),
        [call("c1", "cancelled"), call("c2", "outcome_unknown", index=1)],
        _messages(user(), assistant("calling", "c1", "c2"), tool("c2")),
        8,
        CallModel(step_no=2, offer_tools=True),
    ),
    Case(
        "tools requested past the limit end the turn failed without running them",
        turn(2),
        [call("c1", "succeeded"), call("c2", "pending", step_no=2)],
        _messages(user(), assistant("calling", "c1"), tool("c1"), assistant("still calling", "c2")),
        2,
        FinishTurn(status="failed", answer="still calling", error=LIMIT_2),
    ),
    Case(
        "past the limit an empty assistant text gives no answer",
        turn(2),
        [call("c1", "succeeded"), call("c2", "pending", step_no=2)],
        _messages(user(), assistant("calling", "c1"), tool("c1"), assistant("", "c2")),
        2,
        FinishTurn(status="failed", answer=None, error=LIMIT_2),
    ),
    Case(
        "a turn that used every model call with all results in ends without another call",
        turn(2),
        [call("c1", "succeeded")],
        _messages(user(), assistant("calling", "c1"), tool("c1")),
        2,
        FinishTurn(
            status="failed",
            answer="calling",
            error="The turn used all 2 model call(s) it may make without an accepted result.",
        ),
    ),
    Case(
        "a task answered without a result is nudged to call set_result",
        turn(1),
        [],
        _messages(user(), assistant("here you go")),
        8,
        Nudge(text=NUDGE_TEXT),
        kind="task",
    ),
    Case(
        "a task still without a result after every nudge fails",
        turn(3),
        [],
        _messages(user(), assistant("a"), nudge(), assistant("b"), nudge(), assistant("c")),
        8,
        FinishTurn(status="failed", answer="c", error=no_result_reason(2)),
        kind="task",
    ),
    Case(
        "a task is not nudged past its model-call limit",
        turn(2),
        [],
        _messages(user(), assistant("a"), nudge(), assistant("b")),
        2,
        FinishTurn(status="failed", answer="b", error=no_result_reason(1)),
        kind="task",
    ),
    Case(
        "a task whose set_result was accepted completes with that result",
        turn(1),
        [set_result("c1", "succeeded", {"summary": "done"})],
        _messages(user(), assistant("finishing", "c1"), tool("c1")),
        8,
        FinishTurn(status="completed", answer="finishing", error=None, result={"summary": "done"}),
        kind="task",
    ),
    Case(
        "a task whose set_result was rejected asks the model again",
        turn(1),
        [set_result("c1", "failed", {"summary": 3})],
        _messages(user(), assistant("finishing", "c1"), tool("c1")),
        8,
        CallModel(step_no=2, offer_tools=True),
        kind="task",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_next_action_decides_the_next_step_from_stored_state(case: Case) -> None:
    action = next_action(case.turn, case.calls, case.messages, case.max_calls, kind=case.kind)
    assert action == case.expected
    # Decided from stored state alone: asking again gives the same answer.
    assert next_action(case.turn, case.calls, case.messages, case.max_calls, kind=case.kind) == action


def test_the_limit_reason_names_the_limit_and_says_the_tools_did_not_run() -> None:
    reason = model_call_limit_reason(7)
    assert "7 model call" in reason
    assert "not run" in reason
