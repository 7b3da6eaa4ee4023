"""Anthropic Messages API, streamed. One call per model step."""

from __future__ import annotations

import json
from typing import Any

import httpx2

from parley.errors import ModelError
from parley.runtime.attachments import as_text
from parley.runtime.model import ChatMessage, ModelRequest, ModelResponse, RequestedCall
from parley.runtime.providers.http import object_schema, post_for_answer, sse_events, without_secrets

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
# The image types the Messages API takes as image blocks.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# The documents it takes as document blocks (base64).
PDF = "application/pdf"


def _assistant_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    if message.provider == PROVIDER and isinstance(message.raw, list):
        return list(message.raw)  # verbatim, thinking blocks and signatures included
    blocks: list[dict[str, Any]] = []
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    blocks += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls
    ]
    return blocks


def _tool_result(message: ChatMessage) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": message.text or "(no output)"}]
    for item in message.media:
        if item.get("type") == "image":
            content.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": item["mime_type"], "data": item["data"]},
                }
            )
    return {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": content,
        "is_error": message.is_error,
    }


def build_messages(messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
    """Alternating user/assistant messages; tool results and a following user text share one user turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            blocks = _assistant_blocks(message)
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(no text)"}]})
            continue
        blocks = [_tool_result(message)] if message.role == "tool" else _user_blocks(message)
        if out and out[-1]["role"] == "user":
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": "user", "content": blocks})
    return out


def _user_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    """The text, then each attachment: an image as an image block, a PDF as a document block,
    anything else (a text document included) as text."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}]
    for item in message.attachments:
        has_bytes = isinstance(item.get("data"), str)
        if item.get("mime_type") in IMAGE_TYPES and has_bytes:
            source = {"type": "base64", "media_type": item["mime_type"], "data": item["data"]}
            blocks.append({"type": "image", "source": source})
        elif item.get("mime_type") == PDF and has_bytes:
            source = {"type": "base64", "media_type": PDF, "data": item["data"]}
            blocks.append(
                {"type": "document", "source": source, "title": str(item.get("name") or "document")}
            )
        else:
            blocks.append({"type": "text", "text": as_text(item)})
    return blocks


def _from_message(message: dict[str, Any]) -> ModelResponse:
    """A response that was not streamed (options: {stream: false})."""
    blocks = list(message.get("content") or [])
    usage = message.get("usage") or {}
    return ModelResponse(
        text="".join(b.get("text", "") for b in blocks if b.get("type") == "text"),
        tool_calls=tuple(
            RequestedCall(name=b["name"], arguments=dict(b.get("input") or {}))
            for b in blocks
            if b.get("type") == "tool_use"
        ),
        input_tokens=int(usage.get("input_tokens", 0)),
        output_tokens=int(usage.get("output_tokens", 0)),
        cached_tokens=int(usage.get("cache_read_input_tokens", 0) or 0),
        provider=PROVIDER,
        raw=blocks,
        model=message.get("model"),
        finish_reason=message.get("stop_reason"),
    )


class AnthropicModelClient:
    def __init__(self, http: httpx2.AsyncClient, api_key: str | None, base_url: str | None = None) -> None:
        self._http = http
        self._api_key = api_key
        self._base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            return await self._complete(request)
        except ModelError as exc:
            raise without_secrets(exc, self._api_key) from None

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        options = dict(request.options)
        stream = bool(options.pop("stream", True))
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": int(options.pop("max_tokens", DEFAULT_MAX_TOKENS)),
            "messages": build_messages(request.messages),
            "stream": stream,
            **options,
        }
        if request.instructions:
            body["system"] = request.instructions
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": object_schema(t.input_schema)}
                for t in request.tools
            ]
        if request.tool_choice is not None:
            body["tool_choice"] = {"type": "tool", "name": request.tool_choice}
        headers = {"anthropic-version": API_VERSION, "content-type": "application/json"}
        if self._api_key:
            headers["x-api-key"] = self._api_key

        url = f"{self._base_url}/v1/messages"
        streamed = (lambda response: self._read(response, request)) if stream else None
        return await post_for_answer(self._http, PROVIDER, url, headers, _from_message, streamed, json=body)

    async def _read(self, response: httpx2.Response, request: ModelRequest) -> ModelResponse:
        blocks: dict[int, dict[str, Any]] = {}
        partial_json: dict[int, list[str]] = {}
        usage = {"input": 0, "output": 0, "cached": 0}
        said: dict[str, str | None] = {"model": None, "stop_reason": None}
        stopped = False
        async for event, data in sse_events(response):
            payload = json.loads(data)
            kind = payload.get("type", event)
            if kind == "message_start":
                said["model"] = payload.get("message", {}).get("model")
                u = payload.get("message", {}).get("usage", {})
                usage["input"] = int(u.get("input_tokens", 0))
                usage["cached"] = int(u.get("cache_read_input_tokens", 0) or 0)
                usage["output"] = int(u.get("output_tokens", 0))
            elif kind == "content_block_start":
                blocks[payload["index"]] = dict(payload["content_block"])
            elif kind == "content_block_delta":
                block, delta = blocks[payload["index"]], payload["delta"]
                if delta["type"] == "text_delta":
                    block["text"] = block.get("text", "") + delta["text"]
                    if request.on_text is not None:
                        await request.on_text(delta["text"])
                elif delta["type"] == "input_json_delta":
                    partial_json.setdefault(payload["index"], []).append(delta["partial_json"])
                elif delta["type"] == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + delta["thinking"]
                    if request.on_reasoning is not None:
                        await request.on_reasoning(delta["thinking"])
                elif delta["type"] == "signature_delta":
                    block["signature"] = block.get("signature", "") + delta["signature"]
            elif kind == "message_delta":
                said["stop_reason"] = payload.get("delta", {}).get("stop_reason") or said["stop_reason"]
                usage["output"] = int(payload.get("usage", {}).get("output_tokens", usage["output"]))
            elif kind == "message_stop":
                stopped = True
            elif kind == "error":
                error = payload.get("error", {})
                transient = error.get("type") in ("overloaded_error", "api_error", "rate_limit_error")
                raise ModelError(
                    f"{PROVIDER} stream error: {error.get('message', error)}", transient=transient
                )
        if not stopped:
            raise ModelError(f"{PROVIDER}: the stream ended before the message was complete", transient=True)
        for index, pieces in partial_json.items():
            text = "".join(pieces)
            try:
                blocks[index]["input"] = json.loads(text) if text else {}
            except json.JSONDecodeError as exc:
                raise ModelError(
                    f"{PROVIDER}: a tool call's arguments were not valid JSON", transient=True
                ) from exc
        ordered = [blocks[i] for i in sorted(blocks)]
        text = "".join(b.get("text", "") for b in ordered if b.get("type") == "text")
        calls = tuple(
            RequestedCall(name=b["name"], arguments=dict(b.get("input") or {}))
            for b in ordered
            if b.get("type") == "tool_use"
        )
        return ModelResponse(
            text=text,
            tool_calls=calls,
            input_tokens=usage["input"],
            output_tokens=usage["output"],
            cached_tokens=usage["cached"],
            provider=PROVIDER,
            model=said["model"],
            finish_reason=said["stop_reason"],
            raw=ordered,
        )
