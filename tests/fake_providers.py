"""Fake model providers for tests: the Anthropic Messages and OpenAI Chat Completions wire
formats over real HTTP (server-sent events), served by uvicorn on 127.0.0.1 inside the test.

The fake decides from the newest user text, by keyword:
  "two tools"  -> two parallel write_todos calls     "chunky" -> one call, arguments in many pieces
  "call NAME {json}" lines -> those tool calls, as are pending todos of the plan the instructions
  show ("- [pending] call NAME {json}")
  "think"      -> a thinking block, then text          "429" / "500" / "cut" -> that failure once, then text
  "401"        -> always refused                       anything else -> "echo: <text>" in three pieces
  "stall"      -> (Anthropic) text streamed slowly, then a broken stream, once; then "echo: <text>"
  "leak 401" / "leak 500" / "leak stream" -> always that failure, its message repeating the key it was sent
After tool results it answers "done: <the results>". A request that forces a tool (tool_choice) gets
a call of that tool, as the real APIs do: write_todos with one todo per line of the text. Every
request is recorded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support import TEST_DEADLINE_S

# "stall": the first attempt's text, each piece sent after this pause (longer than the driver's
# TEXT_FLUSH_S, so the pieces are published before the stream breaks).
STALLED_TEXT = "a first try that breaks off"
STALL_PAUSE_S = 0.3


@dataclass
class Recorded:
    provider: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class FakeProviders:
    requests: list[Recorded] = field(default_factory=list)
    failed_once: set[str] = field(default_factory=set)
    port: int = 0

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def anthropic_model(self, name: str = "claude-test", **fields: Any) -> dict[str, Any]:
        """An agent's `model:` on this fake Anthropic, its key in FAKE_PROVIDER_KEY; `fields` add
        to it or replace its parts."""
        return {
            "provider": "anthropic",
            "name": name,
            "base_url": self.anthropic_url,
            "api_key_env": "FAKE_PROVIDER_KEY",
            **fields,
        }

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages", self.anthropic, methods=["POST"]),
                Route("/v1/chat/completions", self.openai, methods=["POST"]),
            ]
        )

    # ------------------------------------------------------------------ shared decisions

    def _failure(self, text: str, request: Request) -> Response | str | None:
        if "leak " in text:
            return _leak(text, request)
        for trigger in ("429", "500", "cut"):
            if trigger in text and text not in self.failed_once:
                self.failed_once.add(text)
                if trigger == "429":
                    return JSONResponse(
                        {"error": {"type": "rate_limit_error", "message": "slow down"}},
                        status_code=429,
                        headers={"retry-after": "0.1"},
                    )
                if trigger == "500":
                    return JSONResponse({"error": {"type": "api_error", "message": "boom"}}, status_code=500)
                return "cut"
        if "401" in text:
            return JSONResponse(
                {"error": {"type": "authentication_error", "message": "invalid x-api-key"}}, 401
            )
        return None

    # ------------------------------------------------------------------ anthropic

    async def anthropic(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(Recorded("anthropic", body, dict(request.headers)))
        refusal = _anthropic_shape_error(body["messages"])
        if refusal is not None:
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": refusal}}
            return JSONResponse(error, status_code=400)
        last = body["messages"][-1]["content"]
        results = [b for b in last if b.get("type") == "tool_result"]
        texts = [b["text"] for b in last if b.get("type") == "text"]
        text = texts[-1] if texts else ""
        if not body.get("stream", True):
            if results:
                return _collapse_anthropic(
                    _anthropic_text("done: " + "; ".join(r["content"][0]["text"] for r in results))
                )
            if "two tools" in text:
                calls = [
                    ("write_todos", {"todos": [{"content": "a"}]}),
                    ("write_todos", {"todos": [{"content": "b"}]}),
                ]
                return _collapse_anthropic(_anthropic_tools(calls))
            return _collapse_anthropic(_anthropic_text(f"plain: {text}"))
        if results:
            answer = "done: " + "; ".join(r["content"][0]["text"] for r in results)
            return _sse(_anthropic_text(answer))
        forced = (body.get("tool_choice") or {}).get("name")
        if forced:
            return _sse(_anthropic_tools([(forced, _forced_arguments(forced, text))]))
        if asked := _asked_calls(text) or _planned_calls(str(body.get("system", ""))):
            return _sse(_anthropic_tools(asked))
        if "stall" in text and text not in self.failed_once:
            # Text that goes out piece by piece (slower than the driver publishes it), then the
            # stream breaks: the retry's text replaces it.
            self.failed_once.add(text)
            return _sse(list(_anthropic_text(STALLED_TEXT))[:5], pause_s=STALL_PAUSE_S)
        failure = self._failure(text, request)
        if isinstance(failure, Response):
            return failure
        if failure == "cut":
            return _sse(list(_anthropic_text("this will be cut"))[:3])
        if isinstance(failure, str) and failure.startswith("stream error: "):
            error = {"type": "error", "error": {"type": "api_error", "message": failure}}
            return _sse([*list(_anthropic_text("half"))[:2], ("error", error)])
        if "two tools" in text:
            return _sse(
                _anthropic_tools(
                    [
                        ("write_todos", {"todos": [{"content": "a"}]}),
                        ("write_todos", {"todos": [{"content": "b"}]}),
                    ]
                )
            )
        if "chunky" in text:
            return _sse(
                _anthropic_tools([("write_todos", {"todos": [{"content": "piece by piece"}]})], chunk=7)
            )
        if "think" in text:
            return _sse(_anthropic_text("thought about it", thinking="let me think"))
        return _sse(_anthropic_text(f"echo: {text}"))

    # ------------------------------------------------------------------ openai

    async def openai(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(Recorded("openai", body, dict(request.headers)))
        messages = body["messages"]
        if not body.get("stream", True):
            if messages[-1]["role"] == "tool":
                return _collapse_openai(_openai_text("done: " + messages[-1]["content"]))
            if "two tools" in messages[-1]["content"]:
                calls = [
                    ("write_todos", {"todos": [{"content": "a"}]}),
                    ("write_todos", {"todos": [{"content": "b"}]}),
                ]
                return _collapse_openai(_openai_tools(calls))
            return _collapse_openai(_openai_text(f"plain: {messages[-1]['content']}"))
        if messages[-1]["role"] == "tool":
            tail: list[str] = []
            for m in reversed(messages):
                if m["role"] != "tool":
                    break
                tail.insert(0, m["content"])
            return _sse(_openai_text("done: " + "; ".join(tail)), done=True)
        text = _openai_text_of(messages[-1]["content"])
        forced = ((body.get("tool_choice") or {}).get("function") or {}).get("name")
        if forced:
            return _sse(_openai_tools([(forced, _forced_arguments(forced, text))]), done=True)
        system = str(messages[0]["content"]) if messages[0]["role"] == "system" else ""
        if asked := _asked_calls(text) or _planned_calls(system):
            return _sse(_openai_tools(asked), done=True)
        compacted = any(str(m.get("content") or "").startswith("[Summary") for m in messages)
        if "too long" in text and not compacted:
            error = {
                "error": {
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                    "message": "This model's maximum context length is 300 tokens",
                }
            }
            return JSONResponse(error, status_code=400)
        failure = self._failure(text, request)
        if isinstance(failure, Response):
            return failure
        if failure == "cut":
            return _sse(list(_openai_text("this will be cut"))[:2], done=False)
        if isinstance(failure, str) and failure.startswith("stream error: "):
            return _sse([*list(_openai_text("half"))[:1], (None, {"error": {"message": failure}})])
        if "two tools" in text:
            calls = [
                ("write_todos", {"todos": [{"content": "a"}]}),
                ("write_todos", {"todos": [{"content": "b"}]}),
            ]
            return _sse(_openai_tools(calls), done=True)
        if "chunky" in text:
            return _sse(
                _openai_tools([("write_todos", {"todos": [{"content": "piece by piece"}]})], chunk=5),
                done=True,
            )
        return _sse(_openai_text(f"echo: {text}"), done=True)


def _asked_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls of "call NAME {json}" lines."""
    calls = []
    for line in text.splitlines():
        if line.startswith("call "):
            name, _, arguments = line[5:].partition(" ")
            calls.append((name, json.loads(arguments or "{}")))
    return calls


def _planned_calls(instructions: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls of the plan's pending todos that the instructions show."""
    pending = "- [pending] "
    return _asked_calls(
        "\n".join(line[len(pending) :] for line in instructions.splitlines() if line.startswith(pending))
    )


def _forced_arguments(tool: str, text: str) -> dict[str, Any]:
    """What the fake model calls a forced tool with: a plan of the text's lines for write_todos."""
    if tool == "write_todos":
        return {"todos": [{"content": line} for line in text.splitlines() if line.strip()]}
    return {}


def _anthropic_shape_error(messages: list[dict[str, Any]]) -> str | None:
    """What the Messages API refuses with a 400 in the order of messages: a first message that is
    not the user's, and a tool_use whose tool_result is not in the very next (user) message, or a
    tool_result without its tool_use just before it (the API's own wording)."""
    if not messages or messages[0]["role"] != "user":
        return 'messages: first message must use the "user" role'
    for index, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        results = {b["tool_use_id"] for b in content if b.get("type") == "tool_result"}
        if results:
            before = messages[index - 1]["content"] if index > 0 else []
            asked = {b["id"] for b in before if isinstance(b, dict) and b.get("type") == "tool_use"}
            if results - asked:
                return (
                    f"messages.{index}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{sorted(results - asked)[0]}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
        uses = [b["id"] for b in content if b.get("type") == "tool_use"]
        following = messages[index + 1]["content"] if index + 1 < len(messages) else None
        answered = {b.get("tool_use_id") for b in following or [] if isinstance(b, dict)}
        if uses and following is not None and set(uses) - answered:
            return (
                f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {sorted(set(uses) - answered)[0]}"
            )
    return None


def _openai_text_of(content: Any) -> str:
    """A user message's text: the content itself, or its text parts (beside images...)."""
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content if part.get("type") == "text")


def _leak(text: str, request: Request) -> Response | str:
    """A careless provider: its error message repeats the key it was sent, in the usual shapes."""
    key = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
    message = f"key {key} refused (x-api-key: {key}; Authorization: Bearer {key})"
    if "leak 401" in text:
        return JSONResponse({"error": {"type": "authentication_error", "message": message}}, 401)
    if "leak 500" in text:
        return JSONResponse({"error": {"type": "api_error", "message": message}}, 500)
    return "stream error: " + message


def _collapse_anthropic(events: Any) -> JSONResponse:
    """The same answer as one JSON message, for a request with stream: false."""
    blocks: dict[int, dict[str, Any]] = {}
    usage: dict[str, Any] = {}
    for _name, data in events:
        if data["type"] == "message_start":
            usage.update(data["message"]["usage"])
        elif data["type"] == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif data["type"] == "content_block_delta":
            delta, block = data["delta"], blocks[data["index"]]
            if delta["type"] == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif delta["type"] == "input_json_delta":
                block["_json"] = block.get("_json", "") + delta["partial_json"]
        elif data["type"] == "message_delta":
            usage.update(data["usage"])
    content = []
    for i in sorted(blocks):
        block = blocks[i]
        if "_json" in block:
            block["input"] = json.loads(block.pop("_json"))
        content.append(block)
    return JSONResponse({"type": "message", "role": "assistant", "content": content, "usage": usage})


def _collapse_openai(events: Any) -> JSONResponse:
    text = ""
    calls: dict[int, dict[str, Any]] = {}
    usage: dict[str, Any] = {}
    for _name, data in events:
        usage = data.get("usage") or usage
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            for piece in delta.get("tool_calls") or []:
                call = calls.setdefault(
                    piece["index"],
                    {"id": piece.get("id"), "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["function"]["name"] += (piece.get("function") or {}).get("name") or ""
                call["function"]["arguments"] += (piece.get("function") or {}).get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return JSONResponse(
        {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}
    )


def _sse(events: Any, done: bool = False, pause_s: float = 0.0) -> StreamingResponse:
    async def stream() -> AsyncIterator[bytes]:
        for event in events:
            if pause_s:
                await anyio.sleep(pause_s)
            name, data = event
            prefix = f"event: {name}\n" if name else ""
            yield f"{prefix}data: {json.dumps(data)}\n\n".encode()
        if done:
            yield b"data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


def _pieces(text: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _anthropic_text(text: str, thinking: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {"usage": {"input_tokens": 50, "output_tokens": 1, "cache_read_input_tokens": 10}},
        },
    )
    index = 0
    if thinking:
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": ""},
            },
        )
        yield (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": thinking},
            },
        )
        yield (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "sig-123"},
            },
        )
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        index = 1
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
    )
    for piece in _pieces(text):
        yield (
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
        )
    yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}},
    )
    yield "message_stop", {"type": "message_stop"}


def _anthropic_tools(
    calls: list[tuple[str, dict[str, Any]]], chunk: int = 1000
) -> Iterator[tuple[str, dict[str, Any]]]:
    yield (
        "message_start",
        {"type": "message_start", "message": {"usage": {"input_tokens": 60, "output_tokens": 1}}},
    )
    for i, (name, args) in enumerate(calls):
        block = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {}}
        yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": block}
        encoded = json.dumps(args)
        for start in range(0, len(encoded), chunk):
            delta = {"type": "input_json_delta", "partial_json": encoded[start : start + chunk]}
            yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}},
    )
    yield "message_stop", {"type": "message_stop"}


def _openai_text(text: str) -> Iterator[tuple[None, dict[str, Any]]]:
    for piece in _pieces(text):
        yield None, {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
    yield None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield (
        None,
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 40,
                "completion_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 5},
            },
        },
    )


def _openai_tools(
    calls: list[tuple[str, dict[str, Any]]], chunk: int = 1000
) -> Iterator[tuple[None, dict[str, Any]]]:
    for i, (name, args) in enumerate(calls):
        first = {
            "index": i,
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        yield None, {"choices": [{"index": 0, "delta": {"tool_calls": [first]}}]}
        encoded = json.dumps(args)
        for start in range(0, len(encoded), chunk):
            piece = {"index": i, "function": {"arguments": encoded[start : start + chunk]}}
            yield None, {"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]}
    yield None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    yield None, {"choices": [], "usage": {"prompt_tokens": 45, "completion_tokens": 15}}


@asynccontextmanager
async def serving_fake_providers() -> AsyncIterator[FakeProviders]:
    fake = FakeProviders()
    server = uvicorn.Server(
        uvicorn.Config(fake.app(), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    server.capture_signals = _no_signals  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(TEST_DEADLINE_S):
            while not server.started:  # noqa: ASYNC110 - uvicorn exposes only a flag
                await anyio.sleep(0.02)
        fake.port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield fake
        finally:
            server.should_exit = True


@contextmanager
def _no_signals() -> Iterator[None]:
    # The test process keeps its own signal handling.
    yield
