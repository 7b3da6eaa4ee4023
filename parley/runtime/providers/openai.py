"""OpenAI Chat Completions, streamed; also any OpenAI-compatible server via base_url
(vLLM, Ollama, llama.cpp, LM Studio). One call per model step."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2

from parley.errors import ModelError
from parley.runtime.attachments import as_text
from parley.runtime.model import ChatMessage, ModelRequest, ModelResponse, RequestedCall
from parley.runtime.providers.http import object_schema, post_for_answer, sse_events, without_secrets
from parley.runtime.providers.wire_json import EncodedMessages, body_with_messages, dumps

# How long the rest of a stream after [DONE] is read before the connection is given up on.
DRAIN_AFTER_DONE_S = 1.0

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# The image types Chat Completions takes as image_url parts.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# The audio Chat Completions takes as input_audio parts, by the format it names.
AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


def build_messages(instructions: str, messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
    system = [{"role": "system", "content": instructions}] if instructions else []
    return [*system, *(wire_message(m) for m in messages)]


def wire_message(message: ChatMessage) -> dict[str, Any]:
    """One conversation message as Chat Completions takes it."""
    if message.role == "user":
        return {"role": "user", "content": _user_content(message)}
    if message.role == "assistant":
        item: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in message.tool_calls
            ]
        if (
            message.provider == PROVIDER
            and isinstance(message.raw, dict)
            and message.raw.get("reasoning_content")
        ):
            item["reasoning_content"] = message.raw["reasoning_content"]
        return item
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text or "(no output)"}


def _user_content(message: ChatMessage) -> str | list[dict[str, Any]]:
    """Plain text, or content parts when the message carries attachments: an image as an
    image_url part (a data: URL), WAV or MP3 audio as an input_audio part, anything else (a
    document's text included) as text."""
    if not message.attachments:
        return message.text
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}]
    for item in message.attachments:
        if item.get("mime_type") in IMAGE_TYPES and isinstance(item.get("data"), str):
            url = f"data:{item['mime_type']};base64,{item['data']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif item.get("mime_type") in AUDIO_FORMATS and isinstance(item.get("data"), str):
            audio = {"data": item["data"], "format": AUDIO_FORMATS[item["mime_type"]]}
            parts.append({"type": "input_audio", "input_audio": audio})
        else:
            parts.append({"type": "text", "text": as_text(item)})
    return parts


def _from_completion(completion: dict[str, Any]) -> ModelResponse:
    """A response that was not streamed (options: {stream: false})."""
    message = (completion.get("choices") or [{}])[0].get("message") or {}
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError as exc:
            raise ModelError(
                f"{PROVIDER}: the arguments of {function.get('name')} were not valid JSON", transient=True
            ) from exc
        calls.append(
            RequestedCall(
                name=function.get("name", ""), arguments=arguments if isinstance(arguments, dict) else {}
            )
        )
    usage = completion.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    reasoning = message.get("reasoning_content")
    return ModelResponse(
        text=message.get("content") or "",
        tool_calls=tuple(calls),
        input_tokens=int(usage.get("prompt_tokens", 0)),
        output_tokens=int(usage.get("completion_tokens", 0)),
        cached_tokens=int(details.get("cached_tokens", 0) or 0),
        provider=PROVIDER,
        raw={"reasoning_content": reasoning} if reasoning else None,
        model=completion.get("model"),
        finish_reason=(completion.get("choices") or [{}])[0].get("finish_reason"),
    )


class OpenAIModelClient:
    def __init__(self, http: httpx2.AsyncClient, api_key: str | None, base_url: str | None = None) -> None:
        self._http = http
        self._api_key = api_key
        self._base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self._encoded = EncodedMessages(wire_message)

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
            "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {}),
            **options,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": object_schema(t.input_schema),
                    },
                }
                for t in request.tools
            ]
        if request.tool_choice is not None:
            body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
        system = [dumps({"role": "system", "content": request.instructions})] if request.instructions else []
        content = body_with_messages(body, [*system, *map(self._encoded.encode, request.messages)])
        headers = {"content-type": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"

        url = f"{self._base_url}/chat/completions"
        streamed = (lambda response: self._read(response, request)) if stream else None
        return await post_for_answer(
            self._http, PROVIDER, url, headers, _from_completion, streamed, content=content
        )

    async def _read(self, response: httpx2.Response, request: ModelRequest) -> ModelResponse:
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: dict[str, Any] = {}
        said: dict[str, str | None] = {"model": None, "finish_reason": None}
        done = False
        events = sse_events(response)
        async for _event, data in events:
            if data == "[DONE]":
                done = True
                # Read on to the end of the body, which the server ends now: a connection whose
                # response was left unread is closed, and the next call would open a new one.
                with anyio.move_on_after(DRAIN_AFTER_DONE_S):
                    async for _ in events:
                        pass
                break
            chunk = json.loads(data)
            if chunk.get("error"):
                raise ModelError(
                    f"{PROVIDER} stream error: {chunk['error'].get('message', chunk['error'])}",
                    transient=True,
                )
            if chunk.get("usage"):
                usage = chunk["usage"]
            said["model"] = chunk.get("model") or said["model"]
            for choice in chunk.get("choices") or []:
                said["finish_reason"] = choice.get("finish_reason") or said["finish_reason"]
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                    if request.on_text is not None:
                        await request.on_text(delta["content"])
                if delta.get("reasoning_content"):
                    reasoning.append(delta["reasoning_content"])
                    if request.on_reasoning is not None:
                        await request.on_reasoning(delta["reasoning_content"])
                for piece in delta.get("tool_calls") or []:
                    call = calls.setdefault(
                        int(piece.get("index", 0)), {"id": None, "name": "", "arguments": []}
                    )
                    if piece.get("id"):
                        call["id"] = piece["id"]
                    function = piece.get("function") or {}
                    if function.get("name"):
                        call["name"] += function["name"]
                    if function.get("arguments"):
                        call["arguments"].append(function["arguments"])
        if not done:
            raise ModelError(f"{PROVIDER}: the stream ended before [DONE]", transient=True)
        requested = []
        for index in sorted(calls):
            call = calls[index]
            raw_args = "".join(call["arguments"])
            try:
                arguments = json.loads(raw_args) if raw_args else {}
            except json.JSONDecodeError as exc:
                raise ModelError(
                    f"{PROVIDER}: the arguments of {call['name']} were not valid JSON", transient=True
                ) from exc
            requested.append(
                RequestedCall(name=call["name"], arguments=arguments if isinstance(arguments, dict) else {})
            )
        details = usage.get("prompt_tokens_details") or {}
        return ModelResponse(
            text="".join(text),
            tool_calls=tuple(requested),
            input_tokens=int(usage.get("prompt_tokens", 0)),
            output_tokens=int(usage.get("completion_tokens", 0)),
            cached_tokens=int(details.get("cached_tokens", 0) or 0),
            provider=PROVIDER,
            model=said["model"],
            finish_reason=said["finish_reason"],
            raw={"reasoning_content": "".join(reasoning)} if reasoning else None,
        )
