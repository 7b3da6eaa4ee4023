"""Request bodies assembled from messages encoded once: the same JSON as encoding the whole body,
and a message seen again is not encoded again."""

from __future__ import annotations

import json
from typing import Any

from parley.runtime.model import ChatMessage, ModelToolCall
from parley.runtime.providers import openai
from parley.runtime.providers.wire_json import EncodedMessages, body_with_messages

CONVERSATION = (
    ChatMessage(role="user", text="héllo <b>"),
    ChatMessage(
        role="assistant", text="", tool_calls=(ModelToolCall(id="c1", name="t", arguments={"a": 1}),)
    ),
    ChatMessage(role="tool", text="result", tool_call_id="c1", tool_name="t"),
    ChatMessage(role="assistant", text="done"),
)


def test_a_body_assembled_from_pieces_is_the_body_encoded_whole() -> None:
    encoded = EncodedMessages(openai.wire_message)
    body: dict[str, Any] = {"model": "m", "stream": True, "tools": [{"x": [1, 2]}]}
    sent = json.loads(body_with_messages(body, [encoded.encode(m) for m in CONVERSATION]))
    assert sent == {**body, "messages": openai.build_messages("", CONVERSATION)}
    assert json.loads(body_with_messages({}, [])) == {"messages": []}


def test_a_message_sent_again_is_not_encoded_again_and_the_memo_is_bounded() -> None:
    built: list[ChatMessage] = []

    def to_wire(message: ChatMessage) -> dict[str, Any]:
        built.append(message)
        return openai.wire_message(message)

    encoded = EncodedMessages(to_wire, limit=3)
    first = [encoded.encode(m) for m in CONVERSATION]
    assert [encoded.encode(m) for m in CONVERSATION[1:]] == first[1:]
    assert built == list(CONVERSATION)  # the last three were kept
    assert encoded.encode(CONVERSATION[0]) == first[0]
    assert built[-1] is CONVERSATION[0]  # the oldest was dropped by the bound of three
    # An equal but different object is encoded on its own (identity, not equality, finds pieces).
    copy = ChatMessage(role="assistant", text="done")
    assert encoded.encode(copy) == first[3] and built[-1] is copy


def test_messages_with_bytes_are_never_kept() -> None:
    built: list[ChatMessage] = []

    def to_wire(message: ChatMessage) -> dict[str, Any]:
        built.append(message)
        return openai.wire_message(message)

    encoded = EncodedMessages(to_wire)
    picture = ChatMessage(role="user", text="see", attachments=({"kind": "image", "mime_type": "image/png"},))
    encoded.encode(picture)
    encoded.encode(picture)
    assert built == [picture, picture]
