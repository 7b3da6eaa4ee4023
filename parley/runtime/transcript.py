"""Stored messages -> the model's view of the conversation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parley.core.records import MessageRecord, NewToolCall
from parley.runtime.model import ChatMessage, ModelToolCall


def assistant_content(
    text: str, calls: Sequence[NewToolCall], provider: str | None = None, raw: Any = None
) -> dict[str, Any]:
    content: dict[str, Any] = {"text": text}
    if calls:
        content["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
    if provider is not None and raw is not None:
        # The provider's own item (thinking blocks...), replayed verbatim to the same provider.
        content["provider"] = provider
        content["raw"] = _with_our_call_ids(raw, calls)
    return content


def _with_our_call_ids(raw: Any, calls: Sequence[NewToolCall]) -> Any:
    """Tool results are matched by our call ids, so the replayed tool_use blocks carry them."""
    if not isinstance(raw, list):
        return raw
    ids = iter(c.id for c in calls)
    out = []
    for block in raw:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            block = {**block, "id": next(ids, block.get("id"))}
        out.append(block)
    return out


def to_chat_messages(
    records: Sequence[MessageRecord], memo: dict[int, ChatMessage] | None = None
) -> tuple[ChatMessage, ...]:
    """Rebuild the conversation; tool results follow their assistant message in call order.
    `memo` keeps the messages built from records (by sequence number, as records never change)
    for the next call on the same transcript."""
    out: list[ChatMessage] = []
    results: dict[str, MessageRecord] = {r.content["tool_call_id"]: r for r in records if r.role == "tool"}
    # Calls before the last user or assistant message are settled: one without a result never ran.
    last_turn_seq = max((r.seq for r in records if r.role in ("user", "assistant")), default=0)
    for record in records:
        if record.role == "tool":
            continue
        message = memo.get(record.seq) if memo is not None else None
        if message is None:
            message = _chat_message(record)
            if memo is not None:
                memo[record.seq] = message
        out.append(message)
        for call in message.tool_calls:
            result = results.get(call.id)
            if result is None and record.seq >= last_turn_seq:
                continue  # still running in the current step
            if result is None:
                # Providers reject a tool call without a result: a call that never ran (a
                # cancel, the model-call limit) gets one that says so.
                out.append(
                    ChatMessage(
                        role="tool",
                        text=NOT_RUN_TEXT,
                        tool_call_id=call.id,
                        tool_name=call.name,
                        is_error=True,
                    )
                )
                continue
            # Results are kept under their negated sequence number (user and assistant
            # messages under theirs), so a provider sees the same objects at every call.
            built = memo.get(-result.seq) if memo is not None else None
            if built is None:
                built = _tool_message(call.id, call.name, result)
                if memo is not None:
                    memo[-result.seq] = built
            out.append(built)
    return tuple(out)


def _tool_message(call_id: str, tool: str, result: MessageRecord) -> ChatMessage:
    return ChatMessage(
        role="tool",
        text=str(result.content.get("text", "")),
        tool_call_id=call_id,
        tool_name=tool,
        is_error=bool(result.content.get("is_error", False)),
        media=tuple(result.content.get("media", ())),
    )


def latest_messages(chat: Sequence[ChatMessage], count: int) -> tuple[ChatMessage, ...]:
    """At most the last `count` messages of a conversation, starting on a user message: Anthropic
    refuses a conversation that starts with the assistant, and a cut at a user message never parts
    a call from its result (results follow their call before the next user message). The window
    starts at the first user message among the last `count`; when there is none (the newest
    exchange alone is longer), at the user message that began that exchange."""
    cut = max(0, len(chat) - count)
    start = next((i for i in range(cut, len(chat)) if chat[i].role == "user"), None)
    if start is None:
        start = next((i for i in range(cut - 1, -1, -1) if chat[i].role == "user"), 0)
    return tuple(chat[start:])


def _chat_message(record: MessageRecord) -> ChatMessage:
    if record.role == "user":
        return ChatMessage(
            role="user",
            text=str(record.content.get("text", "")),
            attachments=tuple(record.content.get("attachments") or ()),
        )
    calls = tuple(
        ModelToolCall(id=c["id"], name=c["name"], arguments=c["arguments"])
        for c in record.content.get("tool_calls", [])
    )
    return ChatMessage(
        role="assistant",
        text=str(record.content.get("text", "")),
        tool_calls=calls,
        provider=record.content.get("provider"),
        raw=record.content.get("raw"),
    )


NOT_RUN_TEXT = "This call was not run: the turn ended before it started."
