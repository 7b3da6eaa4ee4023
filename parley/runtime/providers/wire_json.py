"""Request bodies whose conversation is encoded once per message, not once per call.

A model call sends the whole conversation. The leased transcript hands a provider the same
`ChatMessage` objects call after call (runtime/leased_transcript.py keeps them), so each
message's JSON can be kept and the body assembled from the pieces: a long session no longer
rebuilds and re-encodes its whole history at every step. Pieces are found by the message's
identity (the memo holds the message, so its id cannot be reused while the piece is kept), and a
message carrying attachment or media bytes is never kept (its base64 would fill the memo).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from parley.runtime.model import ChatMessage

# Messages whose JSON a provider client keeps (least recently sent dropped first).
KEPT_MESSAGES = 20_000


def dumps(value: Any) -> str:
    """JSON as HTTP clients send it: compact, UTF-8 kept as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class EncodedMessages:
    """One provider's JSON of each message it sent, by the message's identity."""

    def __init__(self, to_wire: Callable[[ChatMessage], dict[str, Any]], limit: int = KEPT_MESSAGES) -> None:
        self._to_wire = to_wire
        self._limit = limit
        self._kept: OrderedDict[int, tuple[ChatMessage, str]] = OrderedDict()

    def encode(self, message: ChatMessage) -> str:
        key = id(message)
        kept = self._kept.get(key)
        if kept is not None and kept[0] is message:
            self._kept.move_to_end(key)
            return kept[1]
        text = dumps(self._to_wire(message))
        if not message.attachments and not message.media:
            self._kept[key] = (message, text)
            if len(self._kept) > self._limit:
                self._kept.popitem(last=False)
        return text


def body_with_messages(body: Mapping[str, Any], messages: Iterable[str]) -> bytes:
    """`body` as JSON with a "messages" array made of already encoded messages."""
    rest = dumps(dict(body))
    head = '{"messages":[' + ",".join(messages) + "]"
    return (head + ("," + rest[1:] if rest != "{}" else "}")).encode("utf-8")
