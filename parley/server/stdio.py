"""Serving MCP over stdio with a stdin reader that a shutdown can interrupt.

The SDK reads stdin in a worker thread, which a cancel scope cannot stop: on SIGTERM the
process would wait for the client's next line. Reading a pipe with the event loop's
readiness API instead lets shutdown proceed at once.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

READ_CHUNK = 65536


class _StdinLines:
    """Async iterator over the lines of a non-blocking pipe or terminal."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        buffer = b""
        while True:
            await anyio.wait_readable(self._fd)
            try:
                chunk = os.read(self._fd, READ_CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                if buffer:
                    yield buffer.decode("utf-8", errors="replace")
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", errors="replace") + "\n"


def _pollable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def run_stdio(server: MCPServer[Any]) -> None:
    """Serve `server` on this process's stdin/stdout until stdin closes or the task is cancelled."""
    fd = sys.stdin.fileno()
    if not _pollable(fd) or sys.platform == "win32":
        # A regular file (input redirected from disk) cannot be polled; the SDK's reader copes.
        await server.run_stdio_async()
        return
    was_blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        async with stdio_server(stdin=_StdinLines(fd)) as (read_stream, write_stream):  # type: ignore[arg-type]
            lowlevel = server._lowlevel_server
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    finally:
        os.set_blocking(fd, was_blocking)
