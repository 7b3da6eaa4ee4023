"""Bad input gets a tool error that says what to fix; the server keeps serving; nothing is stored.
parley runs in the test's process (the composition root of `parley serve`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import TRANSPORTS, Served, call, call_error, db_rows, serving, write_config

pytestmark = pytest.mark.anyio

MAX_CHARS = 5000  # tests/support.py FAST_RUNTIME max_message_chars


@pytest.fixture(scope="module", params=TRANSPORTS, ids=["-".join(t) for t in TRANSPORTS])
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    config = write_config(tmp_path_factory.mktemp("bad"))
    transport, mode = request.param
    async with serving(config, mode=mode, http=transport == "http") as world:
        yield world


def _counts(db: Path) -> tuple[Any, ...]:
    return tuple(
        db_rows(db, f"SELECT COUNT(*) FROM {table}")[0][0]
        for table in ("sessions", "turns", "messages", "queued_messages", "events")
    )


async def _refused(served: Served, tool: str, **arguments: Any) -> str:
    before = _counts(served.db)
    text = await call_error(served.client, tool, **arguments)
    assert _counts(served.db) == before, f"{tool} was refused but changed the database"
    return text


async def test_unknown_agent_is_refused_with_the_known_names(served: Served) -> None:
    text = await _refused(served, "start_session", agent="nope", message="hi")
    assert "No agent named 'nope'" in text and "demo" in text


async def test_unknown_and_malformed_session_ids_get_the_same_not_found(served: Served) -> None:
    unknown = await _refused(served, "send_message", session_id="ses_" + "0" * 32, message="hi")
    malformed = await _refused(served, "send_message", session_id="../etc/passwd", message="hi")
    assert "No session" in unknown and "No session" in malformed
    assert "list_sessions" in unknown
    await _refused(served, "get_session", session_id="ses_" + "f" * 32)
    await _refused(served, "cancel_turn", session_id="nope")
    await _refused(served, "close_session", session_id="")


async def test_empty_and_oversized_messages_are_refused(served: Served) -> None:
    sid = (await call(served.client, "start_session", agent="demo"))["session_id"]
    empty = await _refused(served, "send_message", session_id=sid, message="   \n ")
    assert "'message'" in empty and "empty" in empty
    huge = await _refused(served, "send_message", session_id=sid, message="x" * (MAX_CHARS + 1))
    assert f"the limit is {MAX_CHARS}" in huge
    oversized_start = await _refused(served, "start_session", agent="demo", message="y" * (MAX_CHARS + 1))
    assert "limit" in oversized_start
    ok = await call(served.client, "send_message", session_id=sid, message="x" * MAX_CHARS)
    assert ok["status"] == "answered"


async def test_wrong_argument_types_and_unknown_arguments_name_the_field(served: Served) -> None:
    text = await _refused(served, "send_message", session_id=42, message="hi")
    assert "'session_id'" in text
    text = await _refused(served, "start_session", agent="demo", message="hi", wait_seconds="soon")
    assert "'wait_seconds'" in text
    text = await _refused(served, "start_session", agent="demo", message="hi", wait_seconds=-1)
    assert "'wait_seconds'" in text
    text = await _refused(served, "start_session", agent="demo", mesage="typo")
    assert "'mesage'" in text and "message" in text
    text = await _refused(served, "send_message", message="no session")
    assert "'session_id'" in text
    text = await _refused(served, "get_session", session_id="ses_" + "0" * 32, messages_limit=0)
    assert "'messages_limit'" in text
    text = await _refused(served, "list_sessions", cursor="garbage")
    assert "'cursor'" in text


async def test_send_message_to_a_closed_session_is_refused(served: Served) -> None:
    sid = (await call(served.client, "start_session", agent="demo", message="hi"))["session_id"]
    await call(served.client, "close_session", session_id=sid)
    text = await _refused(served, "send_message", session_id=sid, message="are you there?")
    assert "closed" in text and "start_session" in text


async def test_the_server_keeps_serving_after_refusals(served: Served) -> None:
    outcome = await call(served.client, "start_session", agent="demo", message="still fine")
    assert outcome["status"] == "answered"


async def test_values_of_the_wrong_json_type_are_refused_not_converted(served: Served) -> None:
    sid = (await call(served.client, "start_session", agent="demo"))["session_id"]
    cases: list[tuple[str, dict[str, Any], str, str]] = [
        ("send_message", {"session_id": sid, "message": "hi", "steer": "yes"}, "steer", "true or false"),
        ("send_message", {"session_id": sid, "message": "hi", "steer": 1}, "steer", "true or false"),
        ("list_sessions", {"limit": True}, "limit", "whole number"),
        ("list_sessions", {"limit": "1"}, "limit", "whole number"),
        ("list_sessions", {"limit": 1.5}, "limit", "whole number"),
        (
            "send_message",
            {"session_id": sid, "message": "hi", "wait_seconds": True},
            "wait_seconds",
            "number",
        ),
        ("send_message", {"session_id": sid, "message": "hi", "wait_seconds": "5"}, "wait_seconds", "number"),
        ("get_session", {"session_id": sid, "messages_from": 2**63}, "messages_from", "at most"),
        ("get_session", {"session_id": sid, "messages_from": 10**30}, "messages_from", "at most"),
        ("get_session", {"session_id": sid, "messages_limit": "10"}, "messages_limit", "whole number"),
        (
            "answer_question",
            {"session_id": sid, "interrupt_id": "x", "decline": "true"},
            "decline",
            "true or false",
        ),
        ("send_message", {"session_id": sid, "message": 7}, "message", "a string"),
    ]
    for tool, arguments, field, fix in cases:
        text = await _refused(served, tool, **arguments)
        assert f"'{field}'" in text and fix in text, (tool, arguments, text)
        assert "internal error" not in text
    # The conversions did not happen: the session holds no message.
    session = await call(served.client, "get_session", session_id=sid)
    assert session["messages"] == []


async def test_messages_without_visible_text_are_refused(served: Served) -> None:
    sid = (await call(served.client, "start_session", agent="demo"))["session_id"]
    for invisible in ["\x00", "\u200b", "\u200b\u200d\ufeff", " \t\x07\n", "\u3164"]:
        text = await _refused(served, "send_message", session_id=sid, message=invisible)
        assert "'message'" in text and "no visible characters" in text, text
        await _refused(served, "start_session", agent="demo", message=invisible)
    asked = await call(served.client, "send_message", session_id=sid, message="/ask Colour? | red | blue")
    interrupt_id = asked["pending"][0]["id"]
    text = await _refused(
        served, "answer_question", session_id=sid, interrupt_id=interrupt_id, answer="\u200b"
    )
    assert "'answer'" in text and "no visible characters" in text
    await call(served.client, "answer_question", session_id=sid, interrupt_id=interrupt_id, answer="red")


async def test_visible_text_is_accepted_and_stored_exactly_as_sent(served: Served) -> None:
    for text in ["héllo 😀 你好", "a\x00b\x07c\u200b", "null", '["a", "b"]', '{"a": 1}', "true", "1"]:
        outcome = await call(served.client, "start_session", agent="demo", message=text)
        assert outcome["status"] == "answered", (text, outcome)
        stored = db_rows(
            served.db,
            "SELECT text FROM queued_messages WHERE session_id = ?",
            (outcome["session_id"],),
        )
        assert stored == [(text,)], (text, stored)
