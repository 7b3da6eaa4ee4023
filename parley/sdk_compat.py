"""The one door to the MCP SDK's private API: every use of an `mcp` internal (a `_name` attribute
or a `mcp.*._module`) in parley, its tests and its benchmarks goes through this module.

pyproject.toml pins `mcp` to the minor version these were written against; tests/test_sdk_compat.py
exercises each of them on real SDK objects and fails naming the internal when an SDK release
moves or renames it. A function here raises `SdkInternalMissing` (naming the internal) instead
of a bare AttributeError when the SDK it runs on has no such internal.

A leaf module: it imports nothing of parley's, so the runtime (the client side of downstream
servers), the server side, parley.testing, the tests and the benchmarks can all use it.
"""

from __future__ import annotations

import copy
import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any

from mcp.client import ClientSession

# Private modules, re-exported under public names. An SDK release that moves one fails here, at
# import, naming the module.
#
# `InMemoryTransport`: the SDK's pairing of a client and a server over in-memory JSON-RPC streams
# (parley.testing and the tests); its public in-process path, Client(server), drops
# notifications such as progress.
from mcp.client._memory import InMemoryTransport

# `Transport`, `TransportStreams`: the type of a client transport and of the pair of streams it
# opens (runtime/mcp/stdio_child.py opens one; tests/task_client.py wraps one). Types only.
from mcp.client._transport import Transport, TransportStreams
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool

# `create_mcp_http_client`: an httpx2 client with the MCP transports' timeouts (tests, benchmarks).
from mcp.shared._httpx_utils import create_mcp_http_client

# `WriteStream`: the protocol of the stream a low-level server writes its answers on
# (server/stdio.py wraps one). A type only.
from mcp.shared._stream_protocols import WriteStream
from mcp.shared.dispatcher import CallOptions

__all__ = [
    "InMemoryTransport",
    "SdkInternalMissing",
    "Transport",
    "TransportStreams",
    "WriteStream",
    "create_mcp_http_client",
    "has_prompt",
    "lowlevel_server",
    "registered_tool",
    "sdk_version",
    "send_raw_request",
]


class SdkInternalMissing(RuntimeError):
    """The installed `mcp` no longer has an internal parley reaches (see the message)."""

    def __init__(self, internal: str) -> None:
        super().__init__(
            f"mcp {sdk_version()} has no {internal}, which parley/sdk_compat.py reaches; "
            "update sdk_compat.py for this SDK release (or install the `mcp` version pyproject.toml pins)"
        )
        self.internal = internal


def sdk_version() -> str:
    """The installed `mcp` distribution's version."""
    return importlib.metadata.version("mcp")


def lowlevel_server(server: MCPServer[Any]) -> Server[Any]:
    """`MCPServer._lowlevel_server`: the low-level `Server` an MCPServer wraps.

    Why: MCPServer has no setLevel handler of its own (server/tools.py registers one on the
    low-level server, which also advertises `logging`), and server/stdio.py runs the low-level
    server on its own line reader (oversized and unparsable lines answered, stdin polled)."""
    try:
        return server._lowlevel_server
    except AttributeError:
        raise SdkInternalMissing("MCPServer._lowlevel_server") from None


def registered_tool(server: MCPServer[Any], name: str) -> Tool | None:
    """`MCPServer._tool_manager.get_tool(name)`: the registered tool `name`, or None.

    Why: server/parley_mcp.py checks a call's arguments against the tool's schema itself, to
    refuse unknown ones and name the field and the fix; MCPServer exposes no registered tool
    publicly."""
    try:
        manager = server._tool_manager
    except AttributeError:
        raise SdkInternalMissing("MCPServer._tool_manager") from None
    return manager.get_tool(name)


def has_prompt(server: MCPServer[Any], name: str) -> bool:
    """`MCPServer._prompt_manager.get_prompt(name)`: whether a prompt `name` is registered.

    Why: the SDK answers an unknown prompt with error code 0 and logs a traceback;
    server/parley_mcp.py answers -32602 (invalid params) before asking the SDK."""
    try:
        manager = server._prompt_manager
    except AttributeError:
        raise SdkInternalMissing("MCPServer._prompt_manager") from None
    return manager.get_prompt(name) is not None


async def send_raw_request(
    session: ClientSession,
    method: str,
    params: Mapping[str, Any],
    opts: CallOptions,
    *,
    edit: Callable[[dict[str, Any], dict[str, str]], None] | None = None,
) -> dict[str, Any]:
    """`ClientSession._stamp`, then `ClientSession._dispatcher.send_raw_request`: send `method`
    below the typed layer and return the result dict unvalidated (a JSON-RPC error raises
    MCPError).

    Why: the SDK has no client side for tasks (a task-augmented `tools/call`, `tasks/*` on
    2026-07-28), and `send_request` validates a result against the method's result type.
    `_stamp` adds what `send_request` would (the `MCP-Protocol-Version` header; on 2026-07-28
    the `_meta` envelope and the `Mcp-Method` header); `edit(params, headers)` may then change the
    stamped request before it goes out. `params` is not modified."""
    data: dict[str, Any] = {"method": method, "params": copy.deepcopy(dict(params))}
    try:
        stamp = session._stamp
    except AttributeError:
        raise SdkInternalMissing("ClientSession._stamp") from None
    try:
        dispatcher = session._dispatcher
    except AttributeError:
        raise SdkInternalMissing("ClientSession._dispatcher") from None
    stamp(data, opts)
    if edit is not None:
        edit(data["params"], opts.setdefault("headers", {}))
    return await dispatcher.send_raw_request(method, data["params"], opts)
