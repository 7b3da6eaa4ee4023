"""A real MCP tool server in the test's process: tools with the annotations a test chooses,
served over streamable HTTP on an ephemeral loopback port, recording every call it runs.

parley reaches it as it reaches any MCP server, through `mcp_servers:` (the `entry` to put there),
so what a test sees is what a deployment would see: effects read from annotations, retries,
approvals, idempotency keys.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from starlette.types import ASGIApp

from parley.server.http import QuietUvicorn, bind_listener
from parley.testing.waiting import DEADLINE_S

# The key parley sends with every call of a tool, in the request's `_meta`.
IDEMPOTENCY_META_KEY = "dev.parley/idempotency-key"

ToolFunction = TypeVar("ToolFunction", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the server ran: the tool, its arguments and parley's idempotency key."""

    tool: str
    arguments: dict[str, Any]
    idempotency_key: str | None


@dataclass
class ToolServer:
    """Tools to offer parley. Declare each with `tool(...)`, then `serve()` it and put its
    `entry` under `mcp_servers:` of the configuration."""

    name: str = "tools"
    calls: list[ToolCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server: MCPServer[Any] = MCPServer(self.name)
        self._url: str | None = None

    def tool(
        self,
        *,
        read_only: bool = False,
        idempotent: bool = False,
        destructive: bool | None = None,
        name: str | None = None,
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Declare a tool (an async function whose typed parameters are its input schema). Its
        annotations say what parley may assume: `read_only` calls are retried freely, `idempotent`
        ones are retried with the same key, others are never repeated once they may have run."""
        annotations = ToolAnnotations(
            read_only_hint=read_only, idempotent_hint=idempotent, destructive_hint=destructive
        )

        def register(function: ToolFunction) -> ToolFunction:
            tool_name = name or function.__name__

            async def recorded(ctx: Context, **arguments: Any) -> Any:
                self.calls.append(ToolCall(tool_name, dict(arguments), _idempotency_key(ctx)))
                return await function(**arguments)

            # The SDK reads the input schema from the signature: the function's own, resolved in
            # its own module, with the context parameter the recording needs.
            signature, hints = _with_context(function)
            recorded.__signature__ = signature  # type: ignore[attr-defined]
            recorded.__annotations__ = hints
            recorded.__doc__ = function.__doc__
            self._server.tool(name=tool_name, annotations=annotations, structured_output=False)(recorded)
            return function

        return register

    def ran(self, tool: str) -> list[ToolCall]:
        """The calls of `tool` the server really ran, in order."""
        return [call for call in self.calls if call.tool == tool]

    @property
    def entry(self) -> dict[str, Any]:
        """What to put under `mcp_servers: {name: ...}` in parley.yaml (once served)."""
        if self._url is None:
            raise RuntimeError("serve() the tool server before naming it in parley's configuration")
        return {"url": self._url}

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[ToolServer]:
        """Serve the tools over streamable HTTP on 127.0.0.1 until the context closes."""
        async with served_over_http(self._server) as url:
            self._url = url
            yield self


@asynccontextmanager
async def served_over_http(
    server: MCPServer[Any], guard: Callable[[ASGIApp], ASGIApp] | None = None
) -> AsyncIterator[str]:
    """Serve any MCP server of the SDK over streamable HTTP on an ephemeral 127.0.0.1 port in this
    process, until the context closes; yields its URL (for `mcp_servers: {name: {url: ...}}`).
    `guard`: wraps the server's ASGI app (a check of each request's credentials, say)."""
    listener = bind_listener("127.0.0.1", 0)
    app: ASGIApp = server.streamable_http_app(streamable_http_path="/mcp")
    if guard is not None:
        app = guard(app)
    # Without signal handling of its own: the test's process keeps its own.
    uv = QuietUvicorn(uvicorn.Config(app, log_level="warning", lifespan="on"))
    with listener:
        async with anyio.create_task_group() as tg:
            tg.start_soon(uv.serve, [listener])
            with anyio.fail_after(DEADLINE_S):
                while not uv.started:  # noqa: ASYNC110  (uvicorn has only this flag)
                    await anyio.sleep(0.01)
            host, port = listener.getsockname()[:2]
            try:
                yield f"http://{host}:{port}/mcp"
            finally:
                uv.should_exit = True


def _idempotency_key(ctx: Context) -> str | None:
    value = (ctx.request_context.meta or {}).get(IDEMPOTENCY_META_KEY)
    return value if isinstance(value, str) else None


def _with_context(function: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, Any]]:
    hints = typing.get_type_hints(function, include_extras=True)
    signature = inspect.signature(function)
    parameters = [
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
    ]
    parameters.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    returns = hints.get("return", signature.return_annotation)
    hints["ctx"] = Context
    return signature.replace(parameters=parameters, return_annotation=returns), hints
