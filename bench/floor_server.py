"""The floor: a bare mcp-SDK server with parley's session-tool shape, for bench/side_by_side.py.

It does the least a server of this shape can do, so what parley costs above it is visible:

- two tools, `start_session(agent, message)` and `send_message(session_id, message)`, whose
  results have parley's turn-outcome shape (structured content `{session_id, turn_id, status:
  "answered", answer, tool_calls, usage, ...}` described by an output schema, plus a short text);
- the history of each session in memory (a list of OpenAI chat messages), and every message
  appended as one JSON line to a file (`--history`), written at once but never fsynced;
- one model call per step with the whole history, on the OpenAI Chat Completions wire format,
  NOT streamed (`stream: false`), with httpx2 (the HTTP client the mcp SDK brings);
- two agents: `bench`, which uses the downstream tool, and `plain`, which does not;
- tools from ONE shared downstream MCP connection: the tests' fixture server
  (`tests/mcp_servers/fixture_server.py`) over stdio, started on first use (as parley starts its
  tool servers) and kept for the life of the process. Its `read_thing` tool is offered to the
  model as `fixture__read_thing`, parley's name for it; a tool call runs on that connection and
  the model is called again with the result, until it answers with text.

No database, no leases, no retries, no queueing, no approvals, no progress: a floor, not a server
anyone should run.

    .venv/bin/python bench/floor_server.py --base-url http://127.0.0.1:PORT/v1 --history h.jsonl [--http]

Over stdio by default; with `--http` it serves streamable HTTP at http://127.0.0.1:PORT/mcp
(`--port 0`: a free port) and prints `listening on http://127.0.0.1:PORT/mcp` on stderr. Run it
from the repository root (the fixture server is started as `python -m tests.mcp_servers...`
in that directory).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TextIO

import anyio
import httpx2
import uvicorn
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parent.parent
FIXTURE_MODULE = "tests.mcp_servers.fixture_server"
SERVER_NAME = "fixture"  # the downstream server's name, as parley's configuration names it
TOOLS = ("read_thing",)  # the downstream tools offered to the model
MAX_STEPS = 8  # model calls per turn, as parley's default limits.max_model_calls_per_turn
# The agents: name -> whether it uses the downstream tool (`plain` talks to the model only).
AGENTS = {"bench": True, "plain": False}


class ToolCallView(BaseModel):
    id: str
    tool: str
    arguments: dict[str, Any]
    status: str
    effect: str
    result: str | None = None
    is_error: bool = False
    requires_approval: bool = False
    server: str | None = None


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_calls: int = 0


class TurnOutcomeView(BaseModel):
    """The fields of parley's turn outcome (parley/server/wire.py), filled the simple way."""

    session_id: str
    turn_id: str | None = None
    status: str
    answer: str | None = None
    result: Any = None
    pending: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[ToolCallView] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    session_status: str | None = None
    queued_message_id: str | None = None
    notes: list[str] = Field(default_factory=list)


class Downstream:
    """ONE shared connection to the fixture MCP server, opened on first use by a task of its own
    (the SDK's Client is entered and left in one task) and shared by every session."""

    def __init__(self, tasks: TaskGroup, fixture_log: str | None) -> None:
        self._tasks = tasks
        env = {"FIXTURE_LOG": fixture_log} if fixture_log else None
        self._params = StdioServerParameters(
            command=sys.executable, args=["-m", FIXTURE_MODULE], env=env, cwd=str(REPO)
        )
        self._lock = anyio.Lock()
        self.client: Client | None = None
        self.model_tools: list[dict[str, Any]] = []  # OpenAI "tools" entries
        self._names: dict[str, str] = {}  # model-facing name -> the server's own tool name

    async def ready(self) -> Client:
        if self.client is None:
            async with self._lock:
                if self.client is None:
                    await self._tasks.start(self._hold)
        assert self.client is not None
        return self.client

    async def _hold(self, *, task_status: TaskStatus[None]) -> None:
        async with Client(self._params) as client:
            listing = await client.list_tools()
            for tool in listing.tools:
                if tool.name in TOOLS:
                    name = f"{SERVER_NAME}__{tool.name}"
                    self._names[name] = tool.name
                    function = {
                        "name": name,
                        "description": tool.description or "",
                        "parameters": tool.input_schema,
                    }
                    self.model_tools.append({"type": "function", "function": function})
            self.client = client
            task_status.started()
            await anyio.sleep_forever()

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        client = await self.ready()
        result = await client.call_tool(self._names[name], arguments)
        text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
        return text, bool(result.is_error)


class Floor:
    def __init__(self, args: argparse.Namespace, tasks: TaskGroup, http: httpx2.AsyncClient) -> None:
        self.base_url = args.base_url.rstrip("/")
        self.model = args.model
        self.instructions = args.instructions
        key = os.environ.get(args.api_key_env, "")
        self.headers = {
            "content-type": "application/json",
            **({"authorization": f"Bearer {key}"} if key else {}),
        }
        self.http = http
        self.downstream = Downstream(tasks, args.fixture_log)
        self.sessions: dict[str, list[dict[str, Any]]] = {}
        self.uses_tools: dict[str, bool] = {}
        self.locks: dict[str, anyio.Lock] = {}
        self.journal: TextIO = Path(args.history).open("a", encoding="utf-8")  # noqa: SIM115 - for the process

    def append(self, session_id: str, turn_id: str, message: dict[str, Any]) -> None:
        """Keep the message in memory and append it to the JSONL file: written, not fsynced."""
        self.sessions[session_id].append(message)
        record = {"session_id": session_id, "turn_id": turn_id, "at": time.time(), "message": message}
        self.journal.write(json.dumps(record) + "\n")
        self.journal.flush()

    async def complete(self, history: list[dict[str, Any]], tools: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": self.instructions}, *history],
            "stream": False,
        }
        if tools and self.downstream.model_tools:
            body["tools"] = self.downstream.model_tools
        response = await self.http.post(f"{self.base_url}/chat/completions", json=body, headers=self.headers)
        response.raise_for_status()
        return dict(response.json())

    async def turn(self, session_id: str, text: str) -> CallToolResult:
        turn_id = f"turn_{uuid.uuid4().hex}"
        async with self.locks[session_id]:
            history = self.sessions[session_id]
            tools = self.uses_tools[session_id]
            if tools:
                await self.downstream.ready()  # the tool listing goes into every model request
            self.append(session_id, turn_id, {"role": "user", "content": text})
            usage = Usage()
            calls: list[ToolCallView] = []
            answer = None
            for _ in range(MAX_STEPS):
                completion = await self.complete(history, tools)
                message = completion["choices"][0]["message"]
                counted = completion.get("usage") or {}
                usage.input_tokens += int(counted.get("prompt_tokens", 0))
                usage.output_tokens += int(counted.get("completion_tokens", 0))
                usage.model_calls += 1
                requested = message.get("tool_calls") or []
                stored: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
                if requested:
                    stored["tool_calls"] = requested
                self.append(session_id, turn_id, stored)
                if not requested:
                    answer = message.get("content") or ""
                    break
                for call in requested:
                    name = call["function"]["name"]
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                    result, is_error = await self.downstream.call(name, arguments)
                    calls.append(
                        ToolCallView(
                            id=call["id"],
                            tool=name,
                            arguments=arguments,
                            status="failed" if is_error else "succeeded",
                            effect="read",
                            result=result,
                            is_error=is_error,
                            server=SERVER_NAME,
                        )
                    )
                    self.append(
                        session_id, turn_id, {"role": "tool", "tool_call_id": call["id"], "content": result}
                    )
            status = "answered" if answer is not None else "failed"
            outcome = TurnOutcomeView(
                session_id=session_id,
                turn_id=turn_id,
                status=status,
                answer=answer,
                tool_calls=calls,
                usage=usage,
                error=None if answer is not None else f"more than {MAX_STEPS} model calls",
                session_status="idle",
            )
        text_out = f"Session {session_id}, turn {turn_id}: {status}.\n\n{answer or outcome.error}"
        return CallToolResult(
            content=[TextContent(type="text", text=text_out)],
            structured_content=outcome.model_dump(mode="json"),
        )


def error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


SENDS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)


def build(floor: Floor) -> MCPServer[Any]:
    mcp: MCPServer[Any] = MCPServer("floor", version="1.0")

    @mcp.tool(title="Start session", annotations=SENDS)
    async def start_session(agent: str, message: str) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Start a session with an agent and send its first message; returns the turn outcome."""
        if agent not in AGENTS:
            return error(f"agent: no agent {agent!r}; the agents are {', '.join(AGENTS)}")
        if not message.strip():
            return error("message: empty")
        session_id = f"ses_{uuid.uuid4().hex}"
        floor.sessions[session_id] = []
        floor.uses_tools[session_id] = AGENTS[agent]
        floor.locks[session_id] = anyio.Lock()
        return await floor.turn(session_id, message)

    @mcp.tool(title="Send message", annotations=SENDS)
    async def send_message(session_id: str, message: str) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Send a message to a session; returns the outcome of the turn that answers it."""
        if session_id not in floor.sessions:
            return error(f"session_id: no session {session_id!r}")
        if not message.strip():
            return error("message: empty")
        return await floor.turn(session_id, message)

    return mcp


async def serve_http(mcp: MCPServer[Any], port: int) -> None:
    app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=False,  # stateful + SSE, as parley serves it
        json_response=False,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", backlog=2048, timeout_graceful_shutdown=1
    )
    server = QuietUvicorn(config)

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                server.should_exit = True
                return

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(stop_on_signal)
        print(f"listening on http://{HOST}:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True)
        await server.serve(sockets=[sock])
        tasks.cancel_scope.cancel()


class QuietUvicorn(uvicorn.Server):
    """uvicorn without its own signal handling (it re-raises SIGTERM once it stops serving): the
    floor stops on SIGTERM itself and then closes its downstream connection."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def run(args: argparse.Namespace) -> None:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        anyio.create_task_group() as tasks,
    ):
        floor = Floor(args, tasks, http)
        mcp = build(floor)
        if args.http:
            await serve_http(mcp, args.port)
        else:
            await mcp.run_stdio_async()
        tasks.cancel_scope.cancel()  # closes the downstream connection (and its process)
    floor.journal.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base-url", required=True, help="the OpenAI-compatible API, e.g. http://127.0.0.1:PORT/v1"
    )
    parser.add_argument("--model", default="bench-model")
    parser.add_argument("--instructions", default="You are a benchmark agent.")
    parser.add_argument(
        "--api-key-env", default="BENCH_FAKE_KEY", help="the environment variable with the key"
    )
    parser.add_argument("--history", required=True, help="the JSONL file every message is appended to")
    parser.add_argument("--fixture-log", default=None, help="FIXTURE_LOG for the downstream fixture server")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--port", type=int, default=0, help="with --http: the port on 127.0.0.1 (0: free)")
    args = parser.parse_args()
    anyio.run(run, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
