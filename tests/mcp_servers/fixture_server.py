"""A real MCP server for parley's tool-source tests, run as a subprocess over stdio or HTTP.

Every call is appended as a JSON line to the file named by FIXTURE_LOG (tool, arguments, the
idempotency key from `_meta`), so tests can count how often a tool really ran.

Usage: python -m tests.mcp_servers.fixture_server [--http PORT] [--hang-list] [--crash-on-first-read]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import anyio
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.types import (
    ElicitRequest,
    ElicitRequestURLParams,
    ImageContent,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel

IDEMPOTENCY_META_KEY = "dev.parley/idempotency-key"
# A 1x1 PNG.
TINY_PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6300010000050001"
        "0d0a2db40000000049454e44ae426082"
    )
).decode()
# 90 characters, too long for model APIs (64 at most) even before parley adds the server prefix.
LONG_NAME = "a_tool_with_a_really_long_name_that_goes_on_and_on_well_past_what_model_apis_accept_" + "x" * 6


# What the page `visit` asks for carries, so a test can tell whether its address leaked.
VISIT_TICKET = "ticket=T-0f3a9c"


def _write_log(path: str | None, ctx: Context, tool: str, arguments: dict[str, Any]) -> None:
    if not path:
        return
    meta = ctx.request_context.meta or {}
    record = {"tool": tool, "arguments": arguments, "key": meta.get(IDEMPOTENCY_META_KEY), "pid": os.getpid()}
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


class Colour(BaseModel):
    colour: Literal["red", "green", "blue"]


async def ask_colour(item: str) -> Elicit[Colour]:
    return Elicit(f"Which colour for the {item}?", Colour)


def build(args: argparse.Namespace, log_path: Path | None = None, in_process: bool = False) -> MCPServer[Any]:
    """The server; `log_path`: where calls are logged (default: $FIXTURE_LOG); `in_process`: it
    runs in the test's own process, so the tools that kill their process refuse instead."""
    server: MCPServer[Any] = MCPServer("fixture", version="1.0")
    log_file = str(log_path) if log_path is not None else os.environ.get("FIXTURE_LOG")
    marker = Path(log_file or "/tmp/fixture").with_suffix(".crashed")

    def _log(ctx: Context, tool: str, arguments: dict[str, Any]) -> None:
        _write_log(log_file, ctx, tool, arguments)

    def _exit(code: int) -> NoReturn:
        if in_process:
            raise RuntimeError("this fixture server runs in the test's process: use the stdio one to crash")
        os._exit(code)

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    idempotent = ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False)
    idempotent_destructive = ToolAnnotations(
        read_only_hint=False, idempotent_hint=True, destructive_hint=True
    )
    non_idempotent = ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False)

    @server.tool(annotations=read_only, structured_output=False)
    async def read_thing(name: str, ctx: Context) -> str:
        """Read a thing by name."""
        _log(ctx, "read_thing", {"name": name})
        if args.crash_on_first_read and not marker.exists():
            marker.write_text("crashed once")
            _exit(3)  # the connection drops mid-call, once
        return f"thing {name} is fine"

    @server.tool(annotations=idempotent, structured_output=False)
    async def set_flag(flag: str, value: bool, ctx: Context) -> str:
        """Set a flag (repeating it changes nothing more)."""
        _log(ctx, "set_flag", {"flag": flag, "value": value})
        return f"flag {flag} = {value}"

    @server.tool(annotations=idempotent_destructive, structured_output=False)
    async def wipe(target: str, ctx: Context) -> str:
        """Wipe a target (idempotent but destructive)."""
        _log(ctx, "wipe", {"target": target})
        return f"wiped {target}"

    @server.tool(annotations=non_idempotent, structured_output=False)
    async def append_note(note: str, ctx: Context) -> str:
        """Append a note (every call adds one)."""
        _log(ctx, "append_note", {"note": note})
        return f"appended {note}"

    @server.tool(structured_output=False)
    async def bare(text: str, ctx: Context) -> str:
        """A tool without annotations."""
        _log(ctx, "bare", {"text": text})
        return f"bare {text}"

    @server.tool(annotations=read_only)
    async def picture(ctx: Context) -> list[TextContent | ImageContent]:
        """Return a tiny picture."""
        _log(ctx, "picture", {})
        return [
            TextContent(type="text", text="here is a picture"),
            ImageContent(type="image", data=TINY_PNG, mime_type="image/png"),
        ]

    @server.tool(annotations=read_only, structured_output=False)
    async def big_text(size: int, ctx: Context) -> str:
        """Return `size` characters."""
        _log(ctx, "big_text", {"size": size})
        return "x" * size

    @server.tool(annotations=read_only, structured_output=False)
    async def slow_progress(steps: int, ctx: Context) -> str:
        """Report progress `steps` times, then finish."""
        _log(ctx, "slow_progress", {"steps": steps})
        for i in range(1, steps + 1):
            await ctx.report_progress(i, steps, f"step {i} of {steps}")
            await anyio.sleep(0.1)
        return f"done after {steps} steps"

    @server.tool(annotations=read_only, structured_output=False)
    async def gate(path: str, ctx: Context) -> str:
        """Finish once the file `path` exists: a call that runs until the test opens the gate."""
        _log(ctx, "gate", {"path": path})
        # The test is another process; a file is the simplest thing both can see.
        while not await anyio.Path(path).exists():  # noqa: ASYNC110
            await anyio.sleep(0.05)
        return f"passed the gate {Path(path).name}"

    @server.tool(annotations=non_idempotent, structured_output=False)
    async def crash(ctx: Context) -> str:
        """Kill the server in the middle of the call."""
        _log(ctx, "crash", {})
        _exit(3)

    @server.tool(annotations=read_only, structured_output=False)
    async def hang(ctx: Context) -> str:
        """Never answer."""
        _log(ctx, "hang", {})
        await anyio.sleep_forever()
        return "never"

    @server.tool(name=LONG_NAME, annotations=read_only, structured_output=False)
    async def long_named(ctx: Context) -> str:
        """A tool whose name is too long for model APIs."""
        _log(ctx, LONG_NAME, {})
        return "long name reached"

    @server.resource("fixture://notes/today", name="today", description="Today's notes")
    def today() -> str:
        return "buy milk"

    @server.prompt(description="Greet someone")
    def greet(person: str) -> str:
        return f"Say hello to {person}."

    @server.tool(annotations=non_idempotent, structured_output=False)
    async def paint(
        item: str, choice: Annotated[ElicitationResult[Colour], Resolve(ask_colour)], ctx: Context
    ) -> str:
        """Paint an item; asks which colour (elicitation on 2025-11-25, input-required on 2026-07-28)."""
        _log(ctx, "paint", {"item": item, "answer": choice.model_dump(mode="json")})
        if isinstance(choice, AcceptedElicitation):
            return f"painted the {item} {choice.data.colour}"
        return f"did not paint the {item}: the user chose {choice.action}"

    @server.tool(annotations=read_only, structured_output=False)
    async def visit(url: str, ctx: Context) -> str:
        """Ask the person to open a page (URL-mode elicitation, 2025-11-25) and say what they chose.
        The page asked for carries a ticket of the server's own, which the caller never sent."""
        page = url + ("&" if "?" in url else "?") + VISIT_TICKET
        result = await ctx.elicit_url(message="Sign the form there.", url=page, elicitation_id="visit-1")
        _log(ctx, "visit", {"url": page, "action": result.action})
        return f"the person chose {result.action}"

    @server.tool(annotations=read_only, structured_output=False)
    async def visit_later(url: str, ctx: Context) -> Any:
        """`visit` for 2026-07-28: the page is asked for in an input-required result, and the call
        comes again with the answer."""
        page = url + ("&" if "?" in url else "?") + VISIT_TICKET
        answer = (ctx.input_responses or {}).get("page")
        if answer is None:
            ask = ElicitRequestURLParams(message="Sign the form there.", url=page, elicitation_id="visit-2")
            return InputRequiredResult(
                input_requests={"page": ElicitRequest(params=ask)}, request_state="visit"
            )
        action = getattr(answer, "action", None) or dict(answer).get("action")
        _log(ctx, "visit", {"url": page, "action": action})
        return f"the person chose {action}"

    if args.hang_list:
        original = server.list_tools

        async def hanging_list() -> Any:
            await anyio.sleep_forever()
            return await original()

        server.list_tools = hanging_list  # type: ignore[method-assign]
    return server


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port")
    parser.add_argument("--hang-list", action="store_true")
    parser.add_argument("--crash-on-first-read", action="store_true")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    started = os.environ.get("FIXTURE_STARTED")
    if started:  # a test that asks when (and how often) this server was started
        with Path(started).open("a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):  # tests/test_e2e_otel.py: spans of this hop too
        from parley.runtime.telemetry import setup_tracing

        setup_tracing(os.environ)
    server = build(args)
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
