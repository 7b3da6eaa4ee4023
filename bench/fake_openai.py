"""A fake OpenAI-compatible model server for the benchmarks: `/v1/chat/completions` over real HTTP
(uvicorn + starlette on 127.0.0.1, an ephemeral port), answering at once, streamed (server-sent
events, `stream: true`) or as one JSON body (`stream: false`).

What it answers, from the last message of the request:
  - a `tool` message (a tool result)        -> the text "done: <the tool results, joined by '; '>"
  - a user message containing "use the tool" -> one call of the offered tool whose name ends with
                                               `read_thing`, arguments {"name": "x"} (HTTP 400 when
                                               no such tool is offered)
  - any other user message                  -> the text "echo: <the message>"
Streamed text comes in three pieces, then a finish chunk, a usage chunk and `data: [DONE]`, as
OpenAI sends it with `stream_options.include_usage`. The usage it reports is an estimate (a token
per 4 characters of the request's messages), so it grows with the history like a real model's.

`GET /stats` answers what it has served so far (requests, streamed or not, request bytes, the
largest number of messages in one request), so a benchmark can check that two servers sent the
model the same conversation.

`--delay-ms` makes every answer wait that long first (default 0: at once).

Run by itself it prints `listening on http://127.0.0.1:PORT/v1` on stderr and serves until
SIGTERM or SIGINT:

    .venv/bin/python bench/fake_openai.py [--port 0]

Self-contained: it does not import parley or the tests (ideas from tests/fake_providers.py).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

HOST = "127.0.0.1"
TOOL_TRIGGER = "use the tool"
TOOL_SUFFIX = "read_thing"
TOOL_ARGUMENTS = {"name": "x"}


class FakeOpenAI:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.stats: dict[str, int] = {
            "requests": 0,
            "streamed": 0,
            "not_streamed": 0,
            "tool_calls": 0,
            "request_bytes": 0,
            "max_messages": 0,
            "errors": 0,
        }

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.completions, methods=["POST"]),
                Route("/stats", self.report, methods=["GET"]),
            ]
        )

    async def report(self, request: Request) -> Response:
        return JSONResponse(self.stats)

    async def completions(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        stats = self.stats
        stats["requests"] += 1
        stats["request_bytes"] += len(raw)
        messages = body.get("messages") or []
        stats["max_messages"] = max(stats["max_messages"], len(messages))
        stream = bool(body.get("stream", False))
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        stats["streamed" if stream else "not_streamed"] += 1
        if not messages:
            return self._error("no messages")
        last = messages[-1]
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 1
        if last.get("role") == "tool":
            results: list[str] = []
            for message in reversed(messages):
                if message.get("role") != "tool":
                    break
                results.insert(0, str(message.get("content") or ""))
            return _text("done: " + "; ".join(results), prompt_tokens, stream)
        text = str(last.get("content") or "")
        if TOOL_TRIGGER in text:
            names = [
                t["function"]["name"]
                for t in body.get("tools") or []
                if t.get("function", {}).get("name", "").endswith(TOOL_SUFFIX)
            ]
            if not names:
                return self._error(f"the request offers no tool named *{TOOL_SUFFIX}")
            stats["tool_calls"] += 1
            return _tool_call(names[0], f"call_{stats['requests']}", prompt_tokens, stream)
        return _text(f"echo: {text}", prompt_tokens, stream)

    def _error(self, message: str) -> Response:
        self.stats["errors"] += 1
        return JSONResponse({"error": {"type": "invalid_request_error", "message": message}}, 400)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _pieces(text: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _text(text: str, prompt_tokens: int, stream: bool) -> Response:
    usage = _usage(prompt_tokens, len(text) // 4 + 1)
    if not stream:
        message = {"role": "assistant", "content": text}
        return _completion(message, "stop", usage)
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": piece}) for piece in _pieces(text)]
    chunks.append(_chunk({}, "stop"))
    return _sse(chunks, usage)


def _tool_call(name: str, call_id: str, prompt_tokens: int, stream: bool) -> Response:
    arguments = json.dumps(TOOL_ARGUMENTS)
    usage = _usage(prompt_tokens, 12)
    if not stream:
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        return _completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", usage)
    first = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    chunks = [
        _chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
        _chunk({}, "tool_calls"),
    ]
    return _sse(chunks, usage)


def _completion(message: dict[str, Any], finish: str, usage: dict[str, Any]) -> Response:
    return JSONResponse(
        {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
    )


def _sse(chunks: list[dict[str, Any]], usage: dict[str, Any]) -> Response:
    def events() -> Iterator[bytes]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"

    body = b"".join(events())

    async def stream() -> AsyncIterator[bytes]:
        yield body  # the whole answer at once: the fake model never makes anyone wait

    return StreamingResponse(stream(), media_type="text/event-stream")


def bind(port: int) -> socket.socket:
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and an
    # accepted socket inherits it. Without it, a keep-alive connection waits for delayed ACKs
    # (about 40 ms a request on Linux).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    return sock


async def serve(port: int, delay_s: float) -> None:
    sock = bind(port)
    fake = FakeOpenAI(delay_s)
    config = uvicorn.Config(
        fake.app(), log_level="warning", access_log=False, lifespan="off", backlog=2048, timeout_keep_alive=30
    )
    server = uvicorn.Server(config)
    actual = sock.getsockname()[1]
    print(f"listening on http://{HOST}:{actual}/v1", file=sys.stderr, flush=True)
    await server.serve(sockets=[sock])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="wait this long before each answer")
    args = parser.parse_args()
    anyio.run(serve, args.port, args.delay_ms / 1000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
