"""Rebuilding the model's view of a conversation from stored messages."""

from __future__ import annotations

from typing import Any

from parley.core.ids import SessionId, TurnId
from parley.core.records import MessageRecord
from parley.runtime.transcript import NOT_RUN_TEXT, to_chat_messages


def _msg(seq: int, role: str, content: dict[str, Any]) -> MessageRecord:
    return MessageRecord(
        session_id=SessionId("ses_" + "0" * 32),
        seq=seq,
        turn_id=TurnId("turn_1"),
        role=role,  # type: ignore[arg-type]
        content=content,
        created_at=0.0,
    )


CALLS = {
    "text": "calling",
    "tool_calls": [{"id": "c1", "name": "a", "arguments": {}}, {"id": "c2", "name": "b", "arguments": {}}],
}


def test_tool_results_follow_their_call_in_call_order_even_when_they_finished_out_of_order() -> None:
    records = [
        _msg(1, "user", {"text": "go"}),
        _msg(2, "assistant", CALLS),
        _msg(3, "tool", {"tool_call_id": "c2", "text": "second", "is_error": False}),
        _msg(4, "tool", {"tool_call_id": "c1", "text": "first", "is_error": True}),
    ]
    chat = to_chat_messages(records)
    assert [(m.role, m.tool_call_id, m.text) for m in chat[2:]] == [
        ("tool", "c1", "first"),
        ("tool", "c2", "second"),
    ]
    assert chat[2].is_error is True


def test_a_call_that_never_ran_gets_a_result_saying_so_once_the_conversation_moved_on() -> None:
    records = [
        _msg(1, "user", {"text": "go"}),
        _msg(2, "assistant", CALLS),
        _msg(3, "tool", {"tool_call_id": "c1", "text": "done", "is_error": False}),
        _msg(4, "user", {"text": "next"}),
    ]
    chat = to_chat_messages(records)
    assert [(m.role, m.tool_call_id) for m in chat] == [
        ("user", None),
        ("assistant", None),
        ("tool", "c1"),
        ("tool", "c2"),
        ("user", None),
    ]
    assert chat[3].text == NOT_RUN_TEXT and chat[3].is_error is True


def test_a_call_still_running_in_the_current_step_gets_no_invented_result() -> None:
    records = [_msg(1, "user", {"text": "go"}), _msg(2, "assistant", CALLS)]
    assert [m.role for m in to_chat_messages(records)] == ["user", "assistant"]
