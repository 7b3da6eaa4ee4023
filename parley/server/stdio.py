"""Serving MCP over stdio with a stdin reader that a shutdown can interrupt.

The SDK reads stdin in a worker thread, which a cancel scope cannot stop: on SIGTERM the
process would wait for the client's next line. Reading a pipe with the event loop's
readiness API instead lets shutdown proceed at once. Reading it ourselves also lets every
line be capped, and every line that is not a message be answered with a JSON-RPC error.

When stdin closes, the client has left, but what it asked before still gets an answer: the
server's reading end stays open until every request read is answered (briefly: waits answer
at once with what they have), since the SDK drops requests still in flight when it sees EOF.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCRequest, JSONRPCResponse

from parley.sdk_compat import WriteStream, lowlevel_server
from parley.server.line_reader import Line, LineSplitter, OversizedLine
from parley.server.unparsable import oversized_response, parse_line

logger = logging.getLogger(__name__)

READ_CHUNK = 65536
# How long the requests read before stdin closed may take to be answered. Waits answer at once
# then (Waits.end_waits), so this bounds only work that cannot be cut short; the SDK's
# stdio client kills a server 2 s after closing its stdin.
CLIENT_GONE_ANSWER_S = 0.4


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


class _Replies:
    """The stream every answer goes out on, noting which requests read from stdin are still
    unanswered: when stdin closes they are waited for, and an error answering a line read after
    `initialize` is held until the `initialize` answer went out (a client reads its handshake
    answer first, and may drop what comes before it)."""

    def __init__(self, inner: WriteStream[SessionMessage]) -> None:
        self._inner = inner
        self._unanswered: set[int | str] = set()
        self._handshake: int | str | None = None
        self._changed = anyio.Event()

    def expect(self, message: JSONRPCMessage) -> None:
        """`message` goes to the server: a request among them is owed an answer."""
        if isinstance(message, JSONRPCRequest):
            self._unanswered.add(message.id)
            if message.method == "initialize":
                self._handshake = message.id

    async def send(self, item: SessionMessage) -> None:
        await self._inner.send(item)
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            self._unanswered.discard(message.id)
            if message.id == self._handshake:
                self._handshake = None
            self._changed.set()
            self._changed = anyio.Event()

    async def send_own(self, message: JSONRPCError) -> None:
        """An error of the reader's own (a line that is not a message): after the handshake's
        answer, if one is due, and without counting as the answer of any request."""
        while self._handshake is not None:
            await self._changed.wait()
        await self._inner.send(SessionMessage(message))

    async def all_answered(self) -> None:
        while self._unanswered:
            await self._changed.wait()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Replies:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def _read_messages(
    fd: int,
    max_line_bytes: int,
    to_server: MemoryObjectSendStream[SessionMessage | Exception],
    replies: _Replies,
    on_client_gone: Callable[[], None],
) -> None:
    """Feed each message on `fd` to the server; answer each line that is not one on `replies`,
    the stream the server writes to, so an error never lands inside another message. At the end
    of input, tell `on_client_gone` and hold the server's input open until what was asked is
    answered, for CLIENT_GONE_ANSWER_S at most."""
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
                    answer = oversized_response(line.size, max_line_bytes, line.head, line.tail)
                    await _answer_own(replies, answer)
                    continue
                await _deliver(line, to_server, replies)
            if not chunk:
                on_client_gone()
                with anyio.move_on_after(CLIENT_GONE_ANSWER_S):
                    await replies.all_answered()
                return


async def _deliver(
    line: Line, to_server: MemoryObjectSendStream[SessionMessage | Exception], replies: _Replies
) -> None:
    if not line.data.strip():
        return
    message = parse_line(line.data)
    if isinstance(message, JSONRPCError):
        await _answer_own(replies, message)
    else:
        replies.expect(message)
        await to_server.send(SessionMessage(message))


async def _answer_own(replies: _Replies, error: JSONRPCError) -> None:
    """Answer a line that is not a message, and log what really became of the answer."""
    try:
        await replies.send_own(error)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        logger.warning(
            "stdin: could not answer a line that is not a message (error %d): stdout is closed",
            error.error.code,
        )
        return
    logger.info("stdin: answered a line that is not a message with error %d", error.error.code)


def _pollable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def run_stdio(
    server: MCPServer[Any], max_line_bytes: int, on_client_gone: Callable[[], None] = lambda: None
) -> None:
    """Serve `server` on this process's stdin/stdout until stdin closes or the task is cancelled;
    `on_client_gone` is called as soon as stdin closes, before the last answers go out."""
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
            replies = _Replies(write_stream)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_read_messages, fd, max_line_bytes, to_server, replies, on_client_gone)
                    lowlevel = lowlevel_server(server)
                    async with from_client:
                        await lowlevel.run(from_client, replies, lowlevel.create_initialization_options())
                    tg.cancel_scope.cancel()
            finally:
                no_input.close()
    finally:
        os.set_blocking(fd, was_blocking)
