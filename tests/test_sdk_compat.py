"""Every private MCP SDK API parley reaches (parley/sdk_compat.py), exercised on real SDK objects in
this process: an SDK release that moves, renames or changes one fails here, naming the internal,
before it fails somewhere far away. The pin in pyproject.toml is checked against the SDK installed."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import tomllib
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.dispatcher import CallOptions
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

from parley import sdk_compat
from parley.sdk_compat import (
    InMemoryTransport,
    SdkInternalMissing,
    create_mcp_http_client,
    has_prompt,
    lowlevel_server,
    registered_tool,
    send_raw_request,
)

ROOT = Path(__file__).resolve().parent.parent

# The private modules sdk_compat.py imports from, and what it takes from each.
PRIVATE_IMPORTS = [
    ("mcp.client._memory", "InMemoryTransport"),
    ("mcp.client._transport", "Transport"),
    ("mcp.client._transport", "TransportStreams"),
    ("mcp.shared._httpx_utils", "create_mcp_http_client"),
    ("mcp.shared._stream_protocols", "WriteStream"),
]


def _server() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("compat")

    @server.tool()
    def echo(text: str) -> str:
        """Echo `text`."""
        return text

    @server.prompt()
    def greeting() -> str:
        return "hello"

    return server


def test_the_pin_in_pyproject_is_the_minor_version_installed() -> None:
    """sdk_compat.py is written against one minor version: pyproject.toml pins `mcp` to it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if re.match(r"mcp\b(?!-)", d)]
    match = re.fullmatch(r"mcp>=(\d+)\.(\d+)(?:\.\d+)?,<(\d+)\.(\d+)", pin)
    assert match, f"mcp is pinned to one minor version (mcp>=X.Y,<X.Y+1), not {pin!r}"
    major, minor, below_major, below_minor = map(int, match.groups())
    assert (below_major, below_minor) == (major, minor + 1), f"{pin!r} admits more than one minor version"
    installed = tuple(int(part) for part in importlib.metadata.version("mcp").split(".")[:2])
    assert installed == (major, minor), f"mcp {installed} is installed; pyproject.toml pins {pin!r}"
    types_version = importlib.metadata.version("mcp-types").split(".")[:2]
    assert tuple(map(int, types_version)) == installed, "mcp-types is the same minor version as mcp"


@pytest.mark.parametrize(("module", "name"), PRIVATE_IMPORTS, ids=[f"{m}.{n}" for m, n in PRIVATE_IMPORTS])
def test_each_private_module_still_has_what_parley_takes_from_it(module: str, name: str) -> None:
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"the SDK has no module {module} (parley/sdk_compat.py imports {name} from it): {exc}")
    assert hasattr(found, name), f"the SDK's {module} has no {name} (parley/sdk_compat.py imports it)"
    assert getattr(sdk_compat, name) is getattr(found, name)


def test_the_re_exported_types_are_what_their_users_take_them_for() -> None:
    # TransportStreams: the (read, write) pair a transport opens; WriteStream: a protocol with send.
    assert getattr(sdk_compat.TransportStreams, "__origin__", None) is tuple, (
        "mcp.client._transport.TransportStreams is no longer a tuple of two streams"
    )
    assert callable(getattr(sdk_compat.WriteStream, "send", None)), (
        "mcp.shared._stream_protocols.WriteStream has no send"
    )
    assert hasattr(sdk_compat.Transport, "__aenter__"), (
        "mcp.client._transport.Transport is no context manager"
    )


@pytest.mark.anyio
async def test_create_mcp_http_client_makes_an_httpx2_client() -> None:
    async with create_mcp_http_client(headers={"x-test": "1"}) as client:
        assert isinstance(client, httpx2.AsyncClient), "mcp.shared._httpx_utils.create_mcp_http_client"
        assert client.headers["x-test"] == "1"


def test_lowlevel_server_is_the_server_an_mcpserver_runs() -> None:
    found = lowlevel_server(_server())
    assert isinstance(found, Server), "MCPServer._lowlevel_server is no longer a mcp.server.lowlevel.Server"
    # What parley calls on it: server/tools.py registers logging/setLevel; server/stdio.py runs it.
    for method in ("add_request_handler", "run", "create_initialization_options"):
        assert callable(getattr(found, method, None)), f"MCPServer._lowlevel_server has no {method}"


def test_registered_tool_finds_a_tool_and_its_argument_metadata() -> None:
    server = _server()
    tool = registered_tool(server, "echo")
    assert tool is not None, "MCPServer._tool_manager.get_tool('echo') found no registered tool"
    assert registered_tool(server, "nothing") is None
    # What server/parley_mcp.py uses: the schema's properties, and the metadata it validates with.
    assert set(tool.parameters["properties"]) == {"text"}, "Tool.parameters is no JSON schema"
    tool.fn_metadata.validate_arguments({"text": "hi"})


def test_has_prompt_tells_a_registered_prompt() -> None:
    server = _server()
    assert has_prompt(server, "greeting"), "MCPServer._prompt_manager.get_prompt found no registered prompt"
    assert not has_prompt(server, "nothing")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_send_raw_request_stamps_and_sends_below_the_typed_layer(mode: Any) -> None:
    seen: list[tuple[dict[str, Any], dict[str, str]]] = []

    def edit(params: dict[str, Any], headers: dict[str, str]) -> None:
        seen.append((dict(params), dict(headers)))

    params = {"name": "echo", "arguments": {"text": "hi"}}
    async with Client(InMemoryTransport(_server()), mode=mode) as client:
        opts: CallOptions = {"timeout": 10}
        raw = await send_raw_request(client.session, "tools/call", params, opts, edit=edit)
        version = client.session.protocol_version
    assert isinstance(raw, dict), "ClientSession._dispatcher.send_raw_request no longer answers a dict"
    assert raw["content"][0]["text"] == "hi"
    assert params == {"name": "echo", "arguments": {"text": "hi"}}, "the caller's params were changed"
    ((stamped, headers),) = seen
    # ClientSession._stamp: the version header always; on 2026-07-28 the _meta envelope too.
    assert headers.get(MCP_PROTOCOL_VERSION_HEADER) == version, (
        f"ClientSession._stamp added no MCP-Protocol-Version header: {headers}"
    )
    assert version is not None
    if mode == "auto":
        assert version != "2025-11-25", "the in-memory client no longer negotiates 2026-07-28"
        assert version in str(stamped.get("_meta")), (
            f"ClientSession._stamp added no _meta envelope: {stamped}"
        )


@pytest.mark.parametrize(
    ("call", "internal"),
    [
        (lambda: lowlevel_server(object()), "MCPServer._lowlevel_server"),  # type: ignore[arg-type]
        (lambda: registered_tool(object(), "x"), "MCPServer._tool_manager"),  # type: ignore[arg-type]
        (lambda: has_prompt(object(), "x"), "MCPServer._prompt_manager"),  # type: ignore[arg-type]
    ],
)
def test_a_missing_internal_is_named(call: Any, internal: str) -> None:
    with pytest.raises(SdkInternalMissing, match=re.escape(internal)):
        call()


@pytest.mark.anyio
async def test_a_missing_session_internal_is_named() -> None:
    with pytest.raises(SdkInternalMissing, match=r"ClientSession\._stamp"):
        await send_raw_request(object(), "ping", {}, {})  # type: ignore[arg-type]


# The SDK internals sdk_compat.py reaches by attribute: nowhere else may name them.
PRIVATE_ATTRIBUTES = {"_lowlevel_server", "_tool_manager", "_prompt_manager", "_stamp", "_dispatcher"}


def test_nothing_but_sdk_compat_reaches_an_sdk_internal() -> None:
    """No module of parley/, tests/ or bench/ but parley/sdk_compat.py imports a private `mcp`
    module (`mcp.*._name`) or names one of the internals it reaches."""
    found = []
    for folder in ("parley", "tests", "bench", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "parley" / "sdk_compat.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                elif isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
                    continue
                else:
                    continue
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: import {module}"
                    for module in modules
                    if module.split(".")[0] in ("mcp", "mcp_types")
                    and any(part.startswith("_") for part in module.split("."))
                ]
    assert not found, "reach the SDK's private API through parley/sdk_compat.py:\n" + "\n".join(found)
