"""One MCP connection to parley that is made again when it breaks.

A `Connection` runs inside its owner's task group (`run`), which enters and leaves each
`mcp.Client` in one task, as anyio requires. A call that finds the connection broken (the server
process died, the HTTP connection dropped, a request timed out) asks for a new one and is sent
again on it, for up to `reconnect_s`. That is safe only because every call the client makes may be
repeated: messages carry a client_message_id (the server returns the turn the first copy
started), decisions are idempotent, and the rest only read or stop.

Connecting again happens only when a call needs it, so an idle client whose server went away
does not start servers or knock on a dead address in a loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import anyio
import httpx2
from anyio.abc import TaskStatus
from mcp import Client, MCPError
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from parley.client.errors import ConnectionFailed, ProtocolError

logger = logging.getLogger(__name__)

T = TypeVar("T")
ClientOpener = Callable[[], AbstractAsyncContextManager[Client]]

# Pause before connecting again after a failed attempt: short, since a restarted HTTP server or a
# new stdio process is usually there within a second; doubling so a dead address is not hammered.
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
# The errors that mean "the connection is gone", as the SDK and its transports raise them.
_BROKEN = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, httpx2.TransportError)


def _innermost(exc: BaseException) -> BaseException:
    """The error inside an ExceptionGroup from a transport's task group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """One line for an error that may be an ExceptionGroup from a transport's task group."""
    exc = _innermost(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Connection:
    """Calls on an MCP client, connected again when the connection breaks."""

    def __init__(self, open_client: ClientOpener, *, reconnect_s: float, target: str) -> None:
        self._open = open_client
        self._reconnect_s = reconnect_s
        self._target = target
        self._client: Client | None = None
        self._generation = 0
        self._changed = anyio.Event()  # set (and replaced) whenever the client comes or goes
        self._demand = anyio.Event()  # a call waits for a connection
        self._broken = anyio.Event()  # a call found the current connection broken
        self._last_error: str | None = None
        self.reconnects = 0

    @property
    def client(self) -> Client:
        """The current mcp.Client (raises ConnectionFailed between connections)."""
        if self._client is None:
            raise ConnectionFailed(f"not connected to {self._target}")
        return self._client

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the connection until cancelled. The first connection must succeed (a wrong command
        or address fails at once, with ConnectionFailed); later ones are retried on demand."""
        started = False
        backoff_s = FIRST_BACKOFF_S
        while True:
            try:
                async with self._open() as client:
                    self._client = client
                    self._generation += 1
                    self._broken = anyio.Event()
                    self._demand = anyio.Event()
                    self._announce()
                    backoff_s = FIRST_BACKOFF_S
                    if not started:
                        started = True
                        task_status.started()
                    await self._broken.wait()
            except Exception as exc:
                if not started:
                    reason = _innermost(exc)
                    if isinstance(reason, ConnectionFailed):
                        raise reason from exc
                    raise ConnectionFailed(f"could not connect to {self._target}: {_describe(exc)}") from exc
                self._last_error = _describe(exc)
                logger.info("connection to %s ended: %s", self._target, self._last_error)
            finally:
                self._client = None
            self._announce()
            await self._demand.wait()
            await anyio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)
            self.reconnects += 1

    async def call(self, operation: Callable[[Client], Awaitable[T]]) -> T:
        """Run `operation` on the current client; on a broken connection, connect again and run it
        again (it must be safe to repeat), for up to reconnect_s after the first failure."""
        deadline: float | None = None
        while True:
            generation, client = await self._connected(deadline)
            try:
                return await operation(client)
            except MCPError as exc:
                if exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                    raise ProtocolError(exc.code, exc.error.message) from exc
                self._last_error = _describe(exc)
            except _BROKEN as exc:
                self._last_error = _describe(exc)
            logger.info("call to %s failed (%s); connecting again", self._target, self._last_error)
            self._mark_broken(generation)
            if deadline is None:
                deadline = anyio.current_time() + self._reconnect_s

    async def _connected(self, deadline: float | None) -> tuple[int, Client]:
        limit = deadline if deadline is not None else anyio.current_time() + self._reconnect_s
        while self._client is None:
            self._demand.set()
            changed = self._changed
            with anyio.move_on_after(max(limit - anyio.current_time(), 0)):
                await changed.wait()
            if self._client is None and changed is self._changed:
                # The time ran out with no new connection (failed attempts announce too).
                raise ConnectionFailed(
                    f"the connection to {self._target} broke and could not be made again within "
                    f"{self._reconnect_s:g} s (last error: {self._last_error or 'none'})"
                )
        return self._generation, self._client

    def _mark_broken(self, generation: int) -> None:
        # Only the connection the call used: a newer one made meanwhile is fine.
        if generation == self._generation and self._client is not None:
            self._client = None
            self._broken.set()

    def _announce(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
