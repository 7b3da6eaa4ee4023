"""The demo model's grammar: plain text, /tool and /sleep directives, quoting tool results."""

from __future__ import annotations

import anyio
import pytest

from parley.runtime.builtin_tools import WRITE_TODOS
from parley.runtime.demo_model import DemoModelClient
from parley.runtime.model import ChatMessage, ModelRequest, ModelToolCall, RequestedCall, ToolSpec
from tests.support import TEST_DEADLINE_S

pytestmark = pytest.mark.anyio

OTHER_TOOL = ToolSpec(name="lookup", description="Look a thing up.", input_schema={"type": "object"})
TOOLS = (WRITE_TODOS, OTHER_TOOL)


def request(*messages: ChatMessage, tools: tuple[ToolSpec, ...] = TOOLS) -> ModelRequest:
    return ModelRequest(model="demo", instructions="You are a test.", messages=messages, tools=tools)


def said(text: str) -> ChatMessage:
    return ChatMessage(role="user", text=text)


def answered(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", text=text)


async def ask(*messages: ChatMessage, tools: tuple[ToolSpec, ...] = TOOLS) -> str:
    """The demo model's text answer to `messages`; fails if it asked for tools instead."""
    response = await DemoModelClient().complete(request(*messages, tools=tools))
    assert response.tool_calls == ()
    return response.text


async def test_plain_text_is_echoed_with_the_number_of_the_message() -> None:
    assert await ask(said("hello there")) == "You said: hello there (message 1 of this session)"


async def test_the_message_number_counts_every_user_message_in_the_request() -> None:
    text = await ask(said("one"), answered("ok"), said("two"), answered("ok"), said("three"))
    assert text == "You said: three (message 3 of this session)"


async def test_plain_lines_are_joined_and_blank_lines_ignored() -> None:
    assert await ask(said("first line\n\n  second line  ")) == (
        "You said: first line second line (message 1 of this session)"
    )


async def test_a_line_starting_with_two_slashes_is_plain_text() -> None:
    assert await ask(said("//not a directive")) == "You said: //not a directive (message 1 of this session)"


async def test_a_request_without_a_user_message_gets_a_plain_answer() -> None:
    assert await ask() == "There is no message to answer yet."


async def test_a_message_of_only_directives_is_acknowledged_with_its_number() -> None:
    assert await ask(said("old"), answered("ok"), said("/sleep 0")) == (
        "You sent only directives (message 2 of this session)."
    )


async def test_several_tool_lines_ask_for_several_calls_in_order() -> None:
    response = await DemoModelClient().complete(
        request(
            said(
                'please\n/tool write_todos {"todos": [{"content": "a"}]}\n/tool lookup {"q": 1}\n/tool lookup'
            )
        )
    )
    assert response.tool_calls == (
        RequestedCall(name="write_todos", arguments={"todos": [{"content": "a"}]}),
        RequestedCall(name="lookup", arguments={"q": 1}),
        RequestedCall(name="lookup", arguments={}),
    )
    assert response.text == "Calling write_todos, lookup, lookup."
    assert response.input_tokens > 0 and response.output_tokens > 0


async def test_tool_results_are_quoted_in_order_with_their_state() -> None:
    calls = (
        ModelToolCall(id="c1", name="write_todos", arguments={}),
        ModelToolCall(id="c2", name="lookup", arguments={}),
    )
    text = await ask(
        said("plan it\n/tool write_todos {}\n/tool lookup {}"),
        ChatMessage(role="assistant", text="Calling write_todos, lookup.", tool_calls=calls),
        ChatMessage(role="tool", text="Plan saved.", tool_call_id="c1", tool_name="write_todos"),
        ChatMessage(role="tool", text="No such thing.", tool_call_id="c2", tool_name="lookup", is_error=True),
    )
    assert text == (
        "You said: plan it (message 1 of this session)\n\n"
        "Tool results:\n"
        "1. write_todos (ok): Plan saved.\n"
        "2. lookup (error): No such thing."
    )


async def test_results_of_an_earlier_message_are_not_quoted_for_a_new_one() -> None:
    calls = (ModelToolCall(id="c1", name="lookup", arguments={}),)
    text = await ask(
        said("/tool lookup {}"),
        ChatMessage(role="assistant", text="Calling lookup.", tool_calls=calls),
        ChatMessage(role="tool", text="found", tool_call_id="c1", tool_name="lookup"),
        answered("Tool results: ..."),
        said("thanks"),
    )
    assert text == "You said: thanks (message 2 of this session)"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("/tool lookup {not json}", "line 2: the arguments of /tool lookup are not JSON"),
        ("/tool lookup [1, 2]", "line 2: the arguments of /tool lookup must be a JSON object"),
        ('/tool lookup "text"', "line 2: the arguments of /tool lookup must be a JSON object"),
        ("/tool", "line 2: /tool needs a tool name"),
        ("/frobnicate now", "line 2: unknown directive /frobnicate; known: /tool, /sleep"),
        ("/sleep soon", "line 2: /sleep needs a number of seconds, got 'soon'"),
        ("/sleep", "line 2: /sleep needs a number of seconds, got ''"),
        ("/sleep -1", "line 2: /sleep takes 0 to 3600 seconds, got -1"),
        ("/sleep 3601", "line 2: /sleep takes 0 to 3600 seconds, got 3601"),
        ("/sleep nan", "line 2: /sleep takes 0 to 3600 seconds, got nan"),
        ("/sleep inf", "line 2: /sleep takes 0 to 3600 seconds, got inf"),
    ],
)
async def test_a_malformed_directive_gets_a_clear_text_answer_and_no_call(line: str, problem: str) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):  # a rejected /sleep must not sleep
        text = await ask(said(f"hi\n{line}\n/tool write_todos {{}}"))
    assert text.startswith(
        "You said: hi (message 1 of this session)\n\nI could not follow your directives:\n- "
    )
    assert f"- {problem}" in text


async def test_every_malformed_directive_is_listed() -> None:
    text = await ask(said("/tool a {\n/bogus\n/sleep x"))
    assert text.startswith("I could not follow your directives:\n")
    assert [line.split(":")[0] for line in text.splitlines()[1:]] == ["- line 1", "- line 2", "- line 3"]


async def test_without_tools_offered_it_answers_instead_of_calling() -> None:
    text = await ask(said('go\n/tool write_todos {"todos": []}\n/tool lookup {}'), tools=())
    assert text == (
        "You said: go (message 1 of this session)\n\n"
        "I was offered no tools on this call, so I answer without calling write_todos, lookup."
    )


async def test_the_same_request_gets_the_same_response() -> None:
    req = request(said("one"), answered("ok"), said('two\n/tool lookup {"q": [1, 2]}'))
    first = await DemoModelClient().complete(req)
    second = await DemoModelClient().complete(req)
    assert first == second
    assert first.tool_calls == (RequestedCall(name="lookup", arguments={"q": [1, 2]}),)


async def test_a_longer_request_is_counted_as_more_input_tokens() -> None:
    short = await DemoModelClient().complete(request(said("hi")))
    long = await DemoModelClient().complete(request(said("hi " * 400)))
    assert long.input_tokens > short.input_tokens
    assert long.output_tokens > short.output_tokens


async def test_sleep_delays_only_the_first_model_call_for_the_message() -> None:
    client = DemoModelClient()
    start = anyio.current_time()
    first = await client.complete(request(said("wait\n/sleep 0.05\n/tool lookup {}")))
    assert anyio.current_time() - start >= 0.05 - 1e-3
    assert [c.name for c in first.tool_calls] == ["lookup"]

    # The follow-up call, with the tool result, must not sleep again (an hour's sleep would trip the deadline).
    calls = (ModelToolCall(id="c1", name="lookup", arguments={}),)
    with anyio.fail_after(TEST_DEADLINE_S):
        second = await client.complete(
            request(
                said("wait\n/sleep 3600\n/tool lookup {}"),
                ChatMessage(role="assistant", text=first.text, tool_calls=calls),
                ChatMessage(role="tool", text="found", tool_call_id="c1", tool_name="lookup"),
            )
        )
    assert "1. lookup (ok): found" in second.text
