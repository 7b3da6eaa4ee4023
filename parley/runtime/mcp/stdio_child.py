"""A downstream MCP server run as a child process, spoken to over its stdin and stdout.

The SDK's stdio client stops a server by closing its stdin, then waits 2 s before SIGTERM and
2 s more before SIGKILL: a server that does not exit when its input ends (a Node server with a
timer, say) held parley's own exit for 4 s. Here closing stdin and SIGTERM to the child's process
group go together, SIGKILL follows after KILL_AFTER_S, and every connection does this in its own
task, so all servers stop at once. The child's stderr goes to parley's log one line at a time,
labelled with the server's name, at the level the owner chooses, instead of onto parley's
stderr unlabelled (`parley check` keeps it at DEBUG).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import anyio
import mcp_types
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.shared.message import SessionMessage

from parley.sdk_compat import TransportStreams

logger = logging.getLogger(__name__)

# How long a child may take to exit after SIGTERM before it is killed.
KILL_AFTER_S = 0.5
# How long the event loop may take to see a killed child gone.
REAP_WAIT_S = 0.5
# A longer stderr line is cut in the log (a child dumping a blob must not flood it).
MAX_STDERR_LINE_CHARS = 2000

_PIPE_ENDED = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


@asynccontextmanager
async def child_transport(
    server: str, params: StdioServerParameters, stderr_level: int
) -> AsyncIterator[TransportStreams]:
    """Start the server's process and yield the streams of its messages; leaving stops it.

    Raises:
        OSError: the command cannot be started.
    """
    process = await anyio.open_process(
        [params.command, *params.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=get_default_environment() | (params.env or {}),
        cwd=params.cwd,
        # Its own process group: SIGTERM reaches what the command started too (npx -> node).
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_stdout, process.stdout, to_session)
            tg.start_soon(_write_stdin, from_session, process.stdin, to_session)
            tg.start_soon(_log_stderr, process.stderr, server, stderr_level)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process, server)
                tg.cancel_scope.cancel()
    finally:
        for stream in (read_stream, write_stream, to_session, from_session):
            stream.close()


async def _read_stdout(
    stdout: ByteReceiveStream, to_session: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    """Each line of the child's stdout as a message (or the error that parsing it raised, which
    the session reports), in linear time however the lines are chunked."""
    pending = bytearray()
    async with to_session:
        with suppress(*_PIPE_ENDED):
            async for chunk in stdout:
                cut = chunk.rfind(b"\n")
                if cut == -1:
                    pending += chunk
                    continue
                lines = bytes(pending + chunk[:cut]).split(b"\n")
                pending = bytearray(chunk[cut + 1 :])
                for line in lines:
                    if line.strip():
                        await to_session.send(_parse(line))


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def _write_stdin(
    from_session: MemoryObjectReceiveStream[SessionMessage],
    stdin: ByteSendStream,
    to_session: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    async with from_session:
        try:
            async for message in from_session:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdin.send(data.encode() + b"\n")
        except _PIPE_ENDED:
            # The child stopped reading (it exited): the session sees the end instead of waiting.
            to_session.close()


async def _log_stderr(stderr: ByteReceiveStream, server: str, level: int) -> None:
    pending = b""
    with suppress(*_PIPE_ENDED):
        async for chunk in stderr:
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                _log_line(server, level, line)
            if len(pending) > MAX_STDERR_LINE_CHARS:
                _log_line(server, level, pending)
                pending = b""
    if pending:
        _log_line(server, level, pending)


def _log_line(server: str, level: int, line: bytes) -> None:
    text = line.decode(errors="replace").rstrip()
    if text:
        logger.log(level, "MCP server %s says: %s", server, text[:MAX_STDERR_LINE_CHARS])


async def _stop(process: Process, server: str) -> None:
    """Close the child's stdin and send its process group SIGTERM together; SIGKILL when it is
    still there after KILL_AFTER_S."""
    assert process.stdin is not None
    stopping = anyio.current_time()
    with suppress(*_PIPE_ENDED):
        await process.stdin.aclose()
    if process.returncode is None:
        _signal_group(process, signal.SIGTERM)
        if not await _exited(process, KILL_AFTER_S):
            logger.warning(
                "MCP server %s (pid %d) did not exit within %.1fs of SIGTERM; killing it",
                server,
                process.pid,
                KILL_AFTER_S,
            )
            _signal_group(process, signal.SIGKILL)
            if not await _exited(process, REAP_WAIT_S):
                logger.warning("MCP server %s (pid %d) is still there after SIGKILL", server, process.pid)
                return  # waiting for it could hang this process's exit
    # Closes our ends of its pipes; the exit is already seen, so this does not wait.
    await process.aclose()
    logger.debug("MCP server %s stopped in %.2fs", server, anyio.current_time() - stopping)


def _signal_group(process: Process, signum: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


async def _exited(process: Process, within_s: float) -> bool:
    """Whether the child exited within `within_s` (anyio's wait sees the exit itself, not the end
    of pipes that a grandchild may still hold)."""
    with anyio.move_on_after(within_s):
        await process.wait()
    return process.returncode is not None
