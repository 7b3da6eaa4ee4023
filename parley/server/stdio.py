"""Serving MCP over stdio with a stdin reader that a shutdown can interrupt.

The SDK reads stdin in a worker thread, which a cancel scope cannot stop: on SIGTERM the
process would wait for the client's next line. Reading a pipe with the event loop's
readiness API instead lets shutdown proceed at once. Reading it ourselves also lets every
line be capped, and every line that is not a message be answered with a JSON-RPC error.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError

from parley.server.line_reader import Line, LineSplitter, OversizedLine
from parley.server.unparsable import oversized_response, parse_line

logger = logging.getLogger(__name__)

READ_CHUNK = 65536


class _NoInput:
    """Stands in for stdin in the SDK's `stdio_server`, which then only writes stdout: parley
    reads stdin itself. Ends when closed, so the SDK's reader task ends too."""

    def __init__(self) -> None:
        self._closed = anyio.Event()

    def close(self) -> None:
        self._closed.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        await self._closed.wait()
        return
        yield  # an async generator that yields nothing


async def _read_messages(
    fd: int,
    max_line_bytes: int,
    to_server: MemoryObjectSendStream[SessionMessage | Exception],
    replies: Any,
) -> None:
    """Feed each message on `fd` to the server; answer each line that is not one on `replies`,
    the stream the server writes to, so an error never lands inside another message."""
    splitter = LineSplitter(max_line_bytes)
    async with to_server:
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                continue
            for line in splitter.feed(chunk) if chunk else splitter.end():
                if isinstance(line, OversizedLine):
                    logger.warning("stdin: refused a %d-byte line (limit %d)", line.size, max_line_bytes)
                    await replies.send(
                        SessionMessage(oversized_response(line.size, max_line_bytes, line.head, line.tail))
                    )
                    continue
                await _deliver(line, to_server, replies)
            if not chunk:
                return


async def _deliver(
    line: Line, to_server: MemoryObjectSendStream[SessionMessage | Exception], replies: Any
) -> None:
    if not line.data.strip():
        return
    message = parse_line(line.data)
    if isinstance(message, JSONRPCError):
        logger.info("stdin: answered a line that is not a message with error %d", message.error.code)
        await replies.send(SessionMessage(message))
    else:
        await to_server.send(SessionMessage(message))


def _pollable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def run_stdio(server: MCPServer[Any], max_line_bytes: int) -> None:
    """Serve `server` on this process's stdin/stdout until stdin closes or the task is cancelled."""
    fd = sys.stdin.fileno()
    if not _pollable(fd) or sys.platform == "win32":
        # A regular file (input redirected from disk) cannot be polled; the SDK's reader copes.
        await server.run_stdio_async()
        return
    was_blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    no_input = _NoInput()
    try:
        async with stdio_server(stdin=no_input) as (_, write_stream):  # type: ignore[arg-type]
            to_server, from_client = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_read_messages, fd, max_line_bytes, to_server, write_stream)
                    lowlevel = server._lowlevel_server
                    async with from_client:
                        await lowlevel.run(
                            from_client, write_stream, lowlevel.create_initialization_options()
                        )
                    tg.cancel_scope.cancel()
            finally:
                no_input.close()
    finally:
        os.set_blocking(fd, was_blocking)
