"""One live connection to an MCP server, owned by a background task.

The mcp SDK's `Client` is an async context manager that must be entered and left in one task,
so each connection runs in a task of its own that holds the client open until it is closed or
the server goes away. Calls from any task then share the client.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import shutil
import sys
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
from anyio.abc import TaskStatus
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    Implementation,
)

from parley.config import McpServerConfig
from parley.runtime.mcp.remote import TasksClientExtension
from parley.runtime.mcp.stdio_child import child_transport
from parley.tls import http_client

logger = logging.getLogger(__name__)


# Answers a question the server asks during a call (form elicitation) on behalf of the user.
Asker = Callable[[ElicitRequestFormParams | ElicitRequestURLParams], Awaitable[ElicitResult]]
RELATED_TASK_META = "io.modelcontextprotocol/related-task"


@dataclass(frozen=True, slots=True)
class Caller:
    """On whose behalf a request goes to an MCP server: the session (a per_session server gets a
    connection per session) and its owner (a server with headers_by_principal gets a connection per
    principal, carrying that principal's headers). None where there is no session or owner."""

    session_id: str | None = None
    principal: str | None = None


NOBODY = Caller()


def lacks_headers(config: McpServerConfig, principal: str | None) -> bool:
    """Whether the server takes each principal's headers and `principal` has none."""
    return bool(config.headers_by_principal) and (
        principal is None or principal not in config.headers_by_principal
    )


def request_headers(config: McpServerConfig, principal: str | None) -> dict[str, str] | None:
    """The headers of a connection made for `principal`: the server's own, then the principal's.
    None: the server takes each principal's headers and this principal has none, so nothing may
    be sent for it (never another principal's, never the bare headers)."""
    if lacks_headers(config, principal):
        return None
    if not config.headers_by_principal:
        return dict(config.headers)
    assert principal is not None
    return {**config.headers, **config.headers_by_principal[principal]}


class BearerAuth(httpx2.Auth):
    """The bearer token of a user_oauth server's connection, set before each request (a refresh
    changes it without a new connection), and what the server answered about it: a 401 (the token
    is not accepted) or a 403 insufficient_scope (it needs a wider scope)."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.unauthorized = 0
        self.wider_scope: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return f"BearerAuth(unauthorized={self.unauthorized})"

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        if self.token is not None:
            request.headers["Authorization"] = f"Bearer {self.token}"
        response = yield request
        if response.status_code == 401:
            self.unauthorized += 1
        elif response.status_code == 403:
            challenge = response.headers.get("www-authenticate", "")
            if "insufficient_scope" in challenge:
                scope = re.search(r'scope="([^"]*)"', challenge)
                self.wider_scope = tuple(scope.group(1).split()) if scope else ()


class McpConnection:
    def __init__(
        self,
        server: str,
        config: McpServerConfig,
        version: str,
        stderr_level: int = logging.INFO,
        headers: dict[str, str] | None = None,
        auth: BearerAuth | None = None,
    ) -> None:
        self.server = server
        # user_oauth: the principal's bearer token, kept current by the sources.
        self.auth = auth
        self._config = config
        # HTTP: the headers every request carries (the server's, or one principal's).
        self._headers = headers if headers is not None else dict(config.headers)
        self._version = version
        # The level at which a stdio server's stderr lines are logged.
        self._stderr_level = stderr_level
        self.client: Client | None = None
        self._stop = anyio.Event()
        self.last_used = anyio.current_time()
        self._askers: dict[int, tuple[str | None, Asker]] = {}
        self._next_asker = itertools.count()

    @contextmanager
    def asking(self, asker: Asker, task_id: str | None = None) -> Iterator[None]:
        """While open, questions of this call (or of downstream task `task_id`) go to `asker`."""
        token = next(self._next_asker)
        self._askers[token] = (task_id, asker)
        try:
            yield
        finally:
            del self._askers[token]

    async def _on_elicit(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        """Route a server's question to the call it belongs to.

        A question about a task names the task; any other question belongs to the call in flight
        on this connection. The protocol does not say which call a question is about, so with
        several calls in flight (or none) it cannot be put to anybody and is answered 'cancel'."""
        meta = params.meta or {}
        related = meta.get(RELATED_TASK_META)
        task_id = related.get("taskId") if isinstance(related, dict) else None
        askers = [a for t, a in self._askers.values() if t == task_id]
        if len(askers) != 1:
            logger.warning(
                "MCP server %s asked a question parley cannot route (task %s; %d call(s) waiting); answered cancel",
                self.server,
                task_id,
                len(askers),
            )
            return ElicitResult(action="cancel")
        return await askers[0](params)

    @property
    def alive(self) -> bool:
        return self.client is not None and not self._stop.is_set()

    def touch(self) -> None:
        self.last_used = anyio.current_time()

    def close(self) -> None:
        self._stop.set()

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        """Connect, report readiness, and hold the connection until closed or broken."""
        started = False
        cfg = self._config
        try:
            async with AsyncExitStack() as stack:
                if cfg.command is not None:
                    target: Any = StdioServerParameters(
                        command=resolve_command(cfg.command), args=cfg.args, env=cfg.env or None, cwd=cfg.cwd
                    )
                    if sys.platform != "win32":  # process groups and signals are POSIX
                        target = child_transport(self.server, target, self._stderr_level)
                else:
                    assert cfg.url is not None
                    http = await stack.enter_async_context(
                        http_client(
                            headers=self._headers,
                            timeout=httpx2.Timeout(cfg.connect_timeout_s, read=None),
                            auth=self.auth,
                        )
                    )
                    target = streamable_http_client(cfg.url, http_client=http)
                client = await stack.enter_async_context(
                    Client(
                        target,
                        mode=cfg.protocol,
                        client_info=Implementation(name="parley", version=self._version),
                        # Questions go to the user; sampling is not offered, so servers cannot spend
                        # the agent's model budget.
                        elicitation_callback=self._on_elicit,
                        # 2026-07-28 servers may answer a call with a task, which parley polls.
                        extensions=[TasksClientExtension()],
                    )
                )
                self.client = client
                started = True
                task_status.started()
                await self._stop.wait()
        except Exception as exc:
            if not started:
                raise
            # The server went away (exited, dropped the connection); the next call reconnects.
            logger.warning("connection to MCP server %s ended: %s", self.server, _describe(exc))
        finally:
            self.client = None


def resolve_command(command: str) -> str:
    """A bare command is looked up on PATH, then next to parley's own Python, so a server installed
    in parley's virtual environment starts even when that environment is not activated."""
    if os.sep in command or shutil.which(command) is not None:
        return command
    beside = Path(sys.executable).parent / command
    return str(beside) if beside.exists() else command


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
