"""`GET /v1/chat/{id}/messages`: a chat's history as AI SDK UI messages, so an app restores a
conversation after a reload (`useChat({messages})`).

Each ended or waiting turn is its user message(s) and one assistant message, built from the same
chunks the chat stream sent (ai_sdk_parts.py) folded into parts as the SDK folds them, with the
same ids: the assistant message is `msg_<turn id>`, a user message keeps the id the app gave it
(else its queued message id). The turn still running is left out: `GET /v1/chat/{id}/stream`
resumes it (`useChat({resume: true})`), and the SDK adds it as a new message.

Pure: the endpoint reads the events and messages; this builds the messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from parley.core.records import EventRecord, QueuedMessageRecord
from parley.runtime.session_events import EventPage
from parley.server.ai_sdk_parts import Chunk, TurnRenderer, plan_chunks

UIMessage = dict[str, Any]
Part = dict[str, Any]

# How each tool chunk moves a tool part on (the other fields it sets are copied as named).
_TOOL_STATES = {
    "tool-input-available": "input-available",
    "tool-approval-request": "approval-requested",
    "tool-approval-response": "approval-responded",
    "tool-output-available": "output-available",
    "tool-output-error": "output-error",
    "tool-output-denied": "output-denied",
}


@dataclass(frozen=True, slots=True)
class TurnHistory:
    """One turn as stored: its messages, its events (with what they name), how it rests."""

    turn_id: str
    messages: list[QueuedMessageRecord]
    page: EventPage
    status: str
    error: str | None = None
    # Plan events with no turn of their own that came before this turn (an approval's).
    early: list[EventRecord] = field(default_factory=list)


def user_message_id(message: QueuedMessageRecord) -> str:
    """The id the app gave the message (chat `m:<id>`), else the queued message's own id."""
    key = message.client_message_id or ""
    return key[2:] if key.startswith("m:") else message.id


def user_message(message: QueuedMessageRecord, base_path: str = "") -> UIMessage:
    """The message's text, then a file part for each attachment whose bytes parley keeps: its
    `url` is the bytes' download path (`GET /v1/sessions/{id}/attachments/{sha256}`, under
    `http.base_path`), fetched with the app's own credentials. A resource link has no bytes here."""
    parts: list[Part] = [{"type": "text", "text": message.text}]
    for ref in message.attachments or []:
        sha256 = ref.get("sha256")
        if not isinstance(sha256, str):
            continue
        url = f"{base_path}/v1/sessions/{message.session_id}/attachments/{sha256}"
        part: Part = {
            "type": "file",
            "mediaType": ref.get("mime_type") or "application/octet-stream",
            "url": url,
        }
        if ref.get("name"):
            part["filename"] = ref["name"]
        parts.append(part)
    return {"id": user_message_id(message), "role": "user", "parts": parts}


def turn_messages(session_id: str, turn: TurnHistory, base_path: str = "") -> list[UIMessage]:
    """The turn's user messages, then its assistant message."""
    renderer = TurnRenderer(session_id, turn.turn_id, v7=True)
    events = turn.page.events
    mode = next((e.data.get("mode") for e in events if e.kind == "turn_started"), None)
    chunks = renderer.start(mode)
    for event in turn.early:
        chunks += plan_chunks(session_id, event)
    for event in events:
        chunks += renderer.event(event, turn.page)
    chunks += renderer.finish(turn.status, turn.error)
    return [*(user_message(m, base_path) for m in turn.messages), fold(chunks)]


def fold(chunks: list[Chunk]) -> UIMessage:
    """One assistant message from its stream's chunks, as the SDK's reader builds it."""
    message: UIMessage = {"id": "", "role": "assistant", "parts": []}
    parts: list[Part] = message["parts"]
    texts: dict[str, Part] = {}
    tools: dict[str, Part] = {}
    step_start = 0
    for chunk in chunks:
        kind = chunk["type"]
        if kind == "start":
            message["id"] = chunk.get("messageId", "")
            if "messageMetadata" in chunk:
                message["metadata"] = chunk["messageMetadata"]
        elif kind == "start-step":
            step_start = len(parts)
            parts.append({"type": "step-start"})
        elif kind == "reset-step":
            # A discarded attempt: its parts go, as version 7 drops them.
            del parts[step_start + 1 :]
        elif kind in ("text-start", "reasoning-start"):
            part: Part = {"type": kind.removesuffix("-start"), "text": "", "state": "done"}
            texts[chunk["id"]] = part
            parts.append(part)
        elif kind in ("text-delta", "reasoning-delta"):
            texts[chunk["id"]]["text"] += chunk["delta"]
        elif kind in _TOOL_STATES:
            _tool_chunk(chunk, parts, tools)
        elif kind.startswith("data-"):
            _data_chunk(chunk, parts)
    return message


def _tool_chunk(chunk: Chunk, parts: list[Part], tools: dict[str, Part]) -> None:
    kind = chunk["type"]
    # A response names its approval only, not the call.
    call_id = chunk.get("toolCallId") or next(
        (k for k, p in tools.items() if p.get("approval", {}).get("id") == chunk.get("approvalId")), ""
    )
    part = tools.get(call_id)
    if part is None:
        if kind != "tool-input-available":
            return
        part = {"type": "dynamic-tool", "toolName": chunk["toolName"], "toolCallId": call_id}
        tools[call_id] = part
        parts.append(part)
    part["state"] = _TOOL_STATES[kind]
    if kind == "tool-input-available":
        part["input"] = chunk.get("input")
    elif kind == "tool-approval-request":
        part["approval"] = {"id": chunk["approvalId"]}
    elif kind == "tool-approval-response":
        part["approval"] = {"id": chunk["approvalId"], "approved": chunk["approved"]}
        if "reason" in chunk:
            part["approval"]["reason"] = chunk["reason"]
    elif kind == "tool-output-available":
        part["output"] = chunk.get("output")
    elif kind == "tool-output-error":
        part["errorText"] = chunk.get("errorText", "")
    elif kind == "tool-output-denied" and "approval" in part:
        part["approval"] = {**part["approval"], "approved": False}


def _data_chunk(chunk: Chunk, parts: list[Part]) -> None:
    """A data part, updated in place when one with its id is shown already."""
    part: Part = {"type": chunk["type"], "data": chunk.get("data")}
    if "id" in chunk:
        part = {"type": chunk["type"], "id": chunk["id"], "data": chunk.get("data")}
        for index, shown in enumerate(parts):
            if shown.get("type") == chunk["type"] and shown.get("id") == chunk["id"]:
                parts[index] = part
                return
    parts.append(part)
