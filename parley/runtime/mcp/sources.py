"""The configured MCP servers as tool sources: connections, cached listings, calls.

One instance per process. Listings are cached for `list_ttl_s` and refreshed in the
background; a server that fails to list is left out (the caller gets the reason to report)
and tried again after a back-off that doubles up to `MAX_BACKOFF_S`, so one broken server
never fails a turn or hides the others.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import nullcontext
from typing import Any, TypeVar, cast

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client, MCPError
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import (
    CallToolResult,
    InputRequiredResult,
    InputResponses,
    RequestParamsMeta,
    Tool,
)

from parley.config import McpServerConfig
from parley.runtime.mcp import remote
from parley.runtime.mcp.connection import (
    NOBODY,
    Asker,
    BearerAuth,
    Caller,
    McpConnection,
    _describe,
    lacks_headers,
    request_headers,
)
from parley.runtime.mcp.failures import (
    CallMaybeSent,
    CallNotSent,
    CallRefused,
    NeedsAuthorization,
    NoCredential,
    ToolSourceUnavailable,
)
from parley.runtime.mcp.remote import RemoteTask, TaskHandle
from parley.runtime.mcp.source_state import BearerTokens, Limit, Listing, Slot, per_principal

logger = logging.getLogger(__name__)

# The request _meta key that carries a call's idempotency key (the same on every retry of one call).
IDEMPOTENCY_META_KEY = "dev.parley/idempotency-key"
MAX_BACKOFF_S = 300.0
HEADER_MISMATCH = -32020
# Connection-level JSON-RPC codes: the transport failed, not the tool.
_TRANSPORT_CODES = frozenset({-32000, -32001})

ProgressCallback = ProgressFnT
T = TypeVar("T")


class McpToolSources:
    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        version: str,
        stderr_level: int = logging.INFO,
        tokens: BearerTokens | None = None,
    ) -> None:
        self._servers = dict(servers)
        # The principals' tokens for servers with auth user_oauth (runtime/oauth/bearer.py).
        self._tokens = tokens
        self._version = version
        # Where stdio servers' stderr lines go in the log (`parley check`: DEBUG, out of sight).
        self._stderr_level = stderr_level
        # By (server, session for per_session, principal for headers_by_principal).
        self._slots: dict[tuple[str, str | None, str | None], Slot] = {}
        # By (server, principal for headers_by_principal): each principal may see other tools.
        self._listings: dict[tuple[str, str | None], Listing] = {}
        self._tg: TaskGroup | None = None
        self._closing = False
        self._in_flight = 0
        # Connections that could not be made, by server since start (GET /metrics).
        self.connection_errors: Counter[str] = Counter()

    @property
    def servers(self) -> Mapping[str, McpServerConfig]:
        return self._servers

    @property
    def closing(self) -> bool:
        """Whether the connections are closing for good (shutdown): a call cut now may have run."""
        return self._closing

    def requests_in_flight(self) -> int:
        """Requests to MCP servers that have been sent and not answered yet."""
        return self._in_flight

    def open_connections(self) -> int:
        return sum(
            1 for slot in self._slots.values() if slot.connection is not None and slot.connection.alive
        )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own every connection's task; cancelling this closes them all."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await self._close_idle_forever()
            finally:
                # Shutting down, before the connections close: a call still running (shielded)
                # whose connection closes under it must not start its server again.
                self._tg = None
                self._closing = True

    # ------------------------------------------------------------------ connections

    def _key(self, server: str, caller: Caller) -> tuple[str, str | None, str | None]:
        cfg = self._servers[server]
        return (
            server,
            caller.session_id if cfg.scope == "per_session" else None,
            caller.principal if per_principal(cfg) else None,
        )

    def _listing_key(self, server: str, caller: Caller) -> tuple[str, str | None]:
        return (server, caller.principal if per_principal(self._servers[server]) else None)

    async def _bearer(self, server: str, caller: Caller) -> str | None:
        """The caller's token for a user_oauth server (None: not one). Raises NeedsAuthorization."""
        if self._servers[server].auth is None:
            return None
        token = None
        if caller.principal is not None and self._tokens is not None:
            token = await self._tokens.access_token(server, caller.principal)
        if token is None:
            raise NeedsAuthorization(server, caller.principal)
        return token

    async def _connection(self, server: str, caller: Caller) -> McpConnection:
        if self._tg is None:
            raise CallNotSent(server, "parley is shutting down")
        cfg = self._servers[server]
        if self.lacks_credential(server, caller):
            raise NoCredential(server, caller.principal)
        token = await self._bearer(server, caller)
        slot = self._slots.setdefault(self._key(server, caller), Slot())
        async with slot.lock:
            if slot.connection is not None and slot.connection.alive:
                if slot.connection.auth is not None:
                    slot.connection.auth.token = token
                slot.connection.touch()
                return slot.connection
            tg = self._tg
            if tg is None:
                raise CallNotSent(server, "parley is shutting down")
            auth = BearerAuth() if token is not None else None
            if auth is not None:
                auth.token = token
            # The headers are built only for a new connection (a reused one already carries them).
            headers = request_headers(cfg, caller.principal)
            connection = McpConnection(server, cfg, self._version, self._stderr_level, headers, auth)
            try:
                with anyio.fail_after(cfg.connect_timeout_s):
                    await tg.start(connection.run)
            except TimeoutError as exc:
                self.connection_errors[server] += 1
                raise CallNotSent(
                    server, f"no answer to the connection within {cfg.connect_timeout_s:g}s"
                ) from exc
            except Exception as exc:
                self._refused_token(server, caller, connection, 0)
                self.connection_errors[server] += 1
                raise CallNotSent(server, f"cannot connect: {_describe(exc)}") from exc
            slot.connection = connection
            return connection

    def _refused_token(self, server: str, caller: Caller, connection: McpConnection, before: int) -> None:
        """Raise NeedsAuthorization when the server answered 401 (after `before` of them) or 403
        insufficient_scope to the connection's token: the request was not served."""
        auth = connection.auth
        if auth is None or caller.principal is None:
            return
        wider, auth.wider_scope = auth.wider_scope, None
        if auth.unauthorized > before:
            if self._tokens is not None and auth.token is not None:
                self._tokens.rejected(server, caller.principal, auth.token)
            connection.close()
            raise NeedsAuthorization(server, caller.principal, refused=True)
        if wider is not None:
            raise NeedsAuthorization(server, caller.principal, wider)

    def release_session(self, session_id: str) -> None:
        """Close the per-session connections of a session that ended."""
        for key, slot in list(self._slots.items()):
            if key[1] == session_id:
                if slot.connection is not None:
                    slot.connection.close()
                del self._slots[key]

    async def _close_idle_forever(self) -> None:
        while True:
            await anyio.sleep(min((c.idle_timeout_s for c in self._servers.values()), default=60.0) / 2)
            now = anyio.current_time()
            for key, slot in list(self._slots.items()):
                server, session_id, principal = key
                conn = slot.connection
                # The one shared connection stays; a session's or a principal's closes when idle.
                if (
                    (session_id is not None or principal is not None)
                    and conn is not None
                    and now - conn.last_used > self._servers[server].idle_timeout_s
                ):
                    conn.close()
                    del self._slots[key]

    def warm_up(self, servers: Iterable[str]) -> None:
        """Start the shared servers among `servers` and list their tools in the background, so
        the first turn after start does not wait for a process to start (a server that fails
        here is tried again, as usual, when a turn needs it)."""
        if self._tg is None:
            return
        for server in sorted(set(servers)):
            cfg = self._servers.get(server)
            # A per-session or per-principal server has no connection to start before a turn.
            if cfg is None or cfg.scope == "per_session" or per_principal(cfg):
                continue
            if (server, None) in self._listings:
                continue
            listing = self._listings[(server, None)] = Listing(refreshing=True, warmed=anyio.Event())
            self._tg.start_soon(self._warm, server, listing)

    async def _warm(self, server: str, listing: Listing) -> None:
        try:
            await self._refresh(server, NOBODY)
        except ToolSourceUnavailable as exc:
            logger.warning("%s; a turn that needs its tools will try again", exc)
        finally:
            listing.refreshing = False
            assert listing.warmed is not None
            listing.warmed.set()
            listing.warmed = None

    # ------------------------------------------------------------------ listing

    async def list_tools(self, server: str, caller: Caller) -> list[Tool]:
        """The server's tools, from the cache when fresh. Raises ToolSourceUnavailable."""
        if server not in self._servers:
            raise ToolSourceUnavailable(server, "not configured in parley.yaml")
        if self.lacks_credential(server, caller):
            # Not the server's failure: no back-off, nothing recorded for other principals.
            raise NoCredential(server, caller.principal)
        listing = self._listings.setdefault(self._listing_key(server, caller), Listing())
        if listing.tools is None and listing.warmed is not None:
            await listing.warmed.wait()  # bounded by the connect and list timeouts
        now = anyio.current_time()
        if listing.tools is not None:
            if now >= listing.expires_at and not listing.refreshing and self._tg is not None:
                listing.refreshing = True
                self._tg.start_soon(self._refresh_quietly, server, caller)
            return listing.tools
        if now < listing.retry_at:
            raise ToolSourceUnavailable(
                server, f"{listing.error} (next try in {listing.retry_at - now:.0f}s)"
            )
        return await self._refresh(server, caller)

    def lacks_credential(self, server: str, caller: Caller) -> bool:
        """Whether the server takes each principal's headers and the caller's principal has none."""
        cfg = self._servers.get(server)
        return cfg is not None and lacks_headers(cfg, caller.principal)

    def unavailable_reason(self, server: str, caller: Caller) -> str | None:
        listing = self._listings.get(self._listing_key(server, caller)) if server in self._servers else None
        return listing.error if listing is not None else None

    def cached_tool(self, server: str, tool: str, caller: Caller) -> Tool | None:
        if server not in self._servers:
            return None
        listing = self._listings.get(self._listing_key(server, caller))
        if listing is None or listing.tools is None:
            return None
        return next((t for t in listing.tools if t.name == tool), None)

    async def _refresh_quietly(self, server: str, caller: Caller) -> None:
        try:
            await self._refresh(server, caller)
        except ToolSourceUnavailable as exc:
            logger.warning("%s; keeping its previous tool list", exc)
        finally:
            self._listings[self._listing_key(server, caller)].refreshing = False

    async def _refresh(self, server: str, caller: Caller) -> list[Tool]:
        try:
            return await self._list(server, caller)
        except NeedsAuthorization as exc:
            if not exc.refused:
                raise
            # A 401 to a user_oauth token: once more, with a refreshed one if there is one.
            return await self._list(server, caller)

    async def _list(self, server: str, caller: Caller) -> list[Tool]:
        cfg = self._servers[server]
        listing = self._listings.setdefault(self._listing_key(server, caller), Listing())
        try:
            connection = await self._connection(server, caller)
            tools: list[Tool] = []
            cursor: str | None = None
            before = connection.auth.unauthorized if connection.auth is not None else 0
            with anyio.fail_after(cfg.list_timeout_s):
                while True:
                    assert connection.client is not None
                    try:
                        page = await connection.client.list_tools(cursor=cursor, cache_mode="bypass")
                    except MCPError:
                        self._refused_token(server, caller, connection, before)
                        raise
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except (NoCredential, NeedsAuthorization):
            # Not the server's failure: no back-off, nothing recorded for other principals.
            raise
        except Exception as exc:
            reason = (
                f"listing its tools took longer than {cfg.list_timeout_s:g}s"
                if isinstance(exc, TimeoutError)
                else (exc.reason if isinstance(exc, ToolSourceUnavailable) else _describe(exc))
            )
            listing.failures += 1
            backoff = min(cfg.retry_backoff_s * 2 ** (listing.failures - 1), MAX_BACKOFF_S)
            listing.retry_at = anyio.current_time() + backoff
            listing.error = reason
            if isinstance(exc, TimeoutError):
                self._drop_shared(server, caller)
            raise ToolSourceUnavailable(server, reason) from exc
        listing.tools = tools
        listing.expires_at = anyio.current_time() + cfg.list_ttl_s
        listing.failures = 0
        listing.error = None
        return tools

    def _drop_shared(self, server: str, caller: Caller) -> None:
        slot = self._slots.get((server, None, self._listing_key(server, caller)[1]))
        if slot is not None and slot.connection is not None:
            slot.connection.close()
            slot.connection = None

    # ------------------------------------------------------------------ calling

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        caller: Caller,
        idempotency_key: str,
        on_progress: ProgressCallback | None = None,
        on_input: Asker | None = None,
        input_responses: InputResponses | None = None,
        request_state: str | None = None,
    ) -> CallToolResult | InputRequiredResult | TaskHandle:
        """Call a tool by its server's own name. A question the server asks during the call (a
        2025-11-25 elicitation) goes to `on_input` (without one, it is answered 'cancel'); a
        2026-07-28 server's input-required result is returned, to be answered later with
        `input_responses` and `request_state`, and so is its task handle when it runs the call
        as a task.

        Raises:
            CallNotSent: the server could not be reached; the tool did not run.
            CallRefused: the server answered with a protocol error; the tool did not run.
            CallMaybeSent: the connection broke or the call timed out; it may have run.
        """

        async def send(client: Client) -> CallToolResult | InputRequiredResult | TaskHandle:
            result = await client.session.call_tool(
                tool,
                arguments,
                progress_callback=on_progress,
                meta=cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: idempotency_key}),
                input_responses=input_responses,
                request_state=request_state,
                allow_input_required=True,
                allow_claimed=True,
            )
            if isinstance(result, CallToolResult | InputRequiredResult | TaskHandle):
                return result
            raise CallRefused(
                f"{server} answered the call with a result parley does not know: {result!r}"[:300]
            )

        limit = Limit()

        async def call(
            connection: McpConnection, client: Client
        ) -> CallToolResult | InputRequiredResult | TaskHandle:
            with connection.asking(limit.extended_by(on_input)) if on_input is not None else nullcontext():
                try:
                    return await send(client)
                except MCPError as exc:
                    if exc.error.code != HEADER_MISMATCH:
                        raise
                    # Our listing of the tool is stale (2026-07-28 HTTP): list again, send once more.
                    await client.list_tools(cache_mode="bypass")
                    return await send(client)

        return await self._guarded(server, caller, call, limit=limit)

    async def start_task(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        caller: Caller,
        idempotency_key: str,
    ) -> RemoteTask:
        """Call a tool as a 2025-11-25 task; the server answers at once with the task. Raises as
        `call_tool` does."""
        cfg = self._servers.get(server)
        ttl_ms = int((cfg.task_ttl_s if cfg else 3600) * 1000)

        async def start(connection: McpConnection, client: Client) -> RemoteTask:
            if not remote.speaks_core_tasks(client):
                raise CallRefused(
                    f"{server} does not take tool calls as tasks (protocol {client.protocol_version})"
                )
            meta = {IDEMPOTENCY_META_KEY: idempotency_key}
            timeout = cfg.call_timeout_s if cfg else 60.0
            try:
                return await remote.start_task(client, tool, arguments, ttl_ms, meta, timeout)
            except ValueError as exc:
                # It answered, but not with a task: it may have run the tool there and then.
                raise CallMaybeSent(f"{server}: {exc}") from exc

        return await self._guarded(server, caller, start)

    async def get_task(self, server: str, caller: Caller, task_id: str) -> RemoteTask:
        async def get(connection: McpConnection, client: Client) -> RemoteTask:
            return await remote.get_task(client, task_id, self._servers[server].call_timeout_s)

        return await self._guarded(server, caller, get)

    async def task_result(
        self, server: str, caller: Caller, task_id: str, on_input: Asker | None = None
    ) -> CallToolResult | None:
        """The result of a downstream task; the server's questions about the task go to
        `on_input`. `tasks/result` blocks while the task runs: after call_timeout_s (plus
        input_wait_s for a question) the request is given up and None returned — the task goes
        on, and is polled again."""
        cfg = self._servers[server]
        limit = Limit()

        async def result(connection: McpConnection, client: Client) -> CallToolResult | None:
            asker = limit.extended_by(on_input) if on_input is not None else None
            with connection.asking(asker, task_id) if asker is not None else nullcontext():
                # Giving up cancels the request (not the task): notifications/cancelled for it.
                with anyio.move_on_after(cfg.call_timeout_s) as scope:
                    limit.scope = scope
                    return await remote.task_result(client, task_id, None)
            return None

        return await self._guarded(server, caller, result, timeout_s=math.inf)

    async def cancel_task(self, server: str, caller: Caller, task_id: str, generation: str) -> None:
        async def cancel(connection: McpConnection, client: Client) -> None:
            timeout = self._servers[server].call_timeout_s
            if generation == remote.CORE_TASKS_VERSION:
                await remote.cancel_task(client, task_id, timeout)
            else:
                await remote.cancel_task_modern(client, task_id, timeout)

        await self._guarded(server, caller, cancel)

    async def get_task_modern(self, server: str, caller: Caller, task_id: str) -> dict[str, Any]:
        """A 2026-07-28 task with its input requests, result or error inlined."""

        async def get(connection: McpConnection, client: Client) -> dict[str, Any]:
            try:
                return await remote.get_task_modern(client, task_id, self._servers[server].call_timeout_s)
            except ValueError as exc:
                raise CallRefused(f"{server}: {exc}") from exc

        return await self._guarded(server, caller, get)

    async def update_task(self, server: str, caller: Caller, task_id: str, answers: dict[str, Any]) -> None:
        """Send the user's answers to a 2026-07-28 task's input requests."""

        async def update(connection: McpConnection, client: Client) -> None:
            await remote.update_task_modern(client, task_id, answers, self._servers[server].call_timeout_s)

        await self._guarded(server, caller, update)

    async def _guarded(
        self,
        server: str,
        caller: Caller,
        work: Callable[[McpConnection, Client], Awaitable[T]],
        timeout_s: float | None = None,
        limit: Limit | None = None,
    ) -> T:
        """Run one request on the server's connection, bounded by `timeout_s` (call_timeout_s by
        default; `limit` may extend it while the user answers a question), with its failures
        sorted by whether the request may have reached the server. A user_oauth server's 401 is
        met with one more try: the token it refused is not sent again (a refresh replaces it, or
        the caller needs to authorize)."""
        try:
            return await self._guarded_once(server, caller, work, timeout_s, limit)
        except NeedsAuthorization as exc:
            if not exc.refused:
                raise
            return await self._guarded_once(server, caller, work, timeout_s, limit)

    async def _guarded_once(
        self,
        server: str,
        caller: Caller,
        work: Callable[[McpConnection, Client], Awaitable[T]],
        timeout_s: float | None,
        limit: Limit | None,
    ) -> T:
        if server not in self._servers:
            raise CallNotSent(server, "not configured in parley.yaml any more")
        cfg = self._servers[server]
        timeout = timeout_s if timeout_s is not None else cfg.call_timeout_s
        connection = await self._connection(server, caller)
        client = connection.client
        if client is None:
            raise CallNotSent(server, "the connection closed before the call")
        self._in_flight += 1
        before = connection.auth.unauthorized if connection.auth is not None else 0
        try:
            with anyio.fail_after(timeout) as scope:
                if limit is not None:
                    limit.scope = scope
                result = await work(connection, client)
        except TimeoutError as exc:
            connection.close()  # a late answer must not be mistaken for the next call's
            raise CallMaybeSent(
                f"no answer from {server} within {timeout:g}s (or the time it was given)"
            ) from exc
        except MCPError as exc:
            self._refused_token(server, caller, connection, before)
            if exc.error.code in _TRANSPORT_CODES:
                connection.close()
                raise CallMaybeSent(
                    f"the connection to {server} broke during the call: {exc.error.message}"
                ) from exc
            raise CallRefused(f"{server} refused the call: {exc.error.message}", exc.error.code) from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            connection.close()
            raise CallMaybeSent(
                f"the connection to {server} broke during the call: {_describe(exc)}"
            ) from exc
        finally:
            self._in_flight -= 1
        connection.touch()
        return result

    async def run_on(self, server: str, caller: Caller, work: Callable[[Any], Awaitable[Any]]) -> Any:
        """Run `work(client)` on the server's connection (resources, prompts), bounded by call_timeout_s."""
        if server not in self._servers:
            raise ToolSourceUnavailable(server, "not configured in parley.yaml")
        cfg = self._servers[server]
        connection = await self._connection(server, caller)
        try:
            with anyio.fail_after(cfg.call_timeout_s):
                return await work(connection.client)
        except TimeoutError as exc:
            connection.close()
            raise CallMaybeSent(f"no answer from {server} within {cfg.call_timeout_s:g}s") from exc
        except MCPError as exc:
            raise CallRefused(f"{server}: {exc.error.message}") from exc
