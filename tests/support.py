"""Test harness: `parley serve` as a real subprocess, driven by the mcp SDK's real client.

The harness owns the server's pipes (instead of letting the SDK spawn it) so a test can
close stdin, send SIGTERM or SIGKILL, and read the exit code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
    suppress,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar, Unpack, overload

import anyio
import httpx2
import mcp.types as types
import yaml
from anyio.abc import Process, SocketStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from parley.runtime.model import ModelClient
from parley.sdk_compat import InMemoryTransport  # the SDK's own in-memory pairing
from parley.storage.ports import Store
from parley.storage.sqlite import open_sqlite_store
from parley.testing import CALL_DEADLINE_S as CALL_DEADLINE_S
from parley.testing import DEADLINE_S, ParleyUnderTest, call, call_error, eventually, parley_app
from parley.testing import FAST_RUNTIME as TESTING_RUNTIME
from parley.testing.tools import served_over_http
from parley.tls import http_client

# Re-exported: the e2e modules import these from here.
__all__ = ["CALL_DEADLINE_S", "call", "call_error", "eventually"]

# One deadline for every wait in the tests (a state to be reached, a process to start or exit, a
# lock to be free): parley.testing's, which users' tests wait with too. Every other wait derives
# from it; a tool call may wait on the server up to it and then needs it again to come back.
TEST_DEADLINE_S = DEADLINE_S
# How long a state must last for a test to see it before it passes by itself (a model call that
# the test steers, a durable timer it watches): a test cannot hold these, so they get a share of
# the deadline rather than a guess at how fast the machine is.
STATE_WINDOW_S = TEST_DEADLINE_S / 10

REPO = Path(__file__).resolve().parent.parent
# Our MCP server for tests (tests/mcp_servers/fixture_server.py); it logs every call it really runs.
FIXTURE_SERVER = [sys.executable, "-m", "tests.mcp_servers.fixture_server"]
FIXTURE_LOG = "fixture.jsonl"

# (transport, client mode): every conversation-level behaviour is checked on each.
TRANSPORTS = [("stdio", "legacy"), ("stdio", "auto"), ("http", "legacy"), ("http", "auto")]

# A raw 2025-06-18 `initialize` over streamable HTTP, and the headers every MCP POST carries
# (tests that speak HTTP without the SDK client, to see status codes and limits).
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-http-test", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

# parley.testing's quick timings, and a message limit the bad-input tests reach.
FAST_RUNTIME = {**TESTING_RUNTIME, "max_message_chars": 5000}


@dataclass(frozen=True)
class Database:
    """Where a test's parley keeps its data: a SQLite file, or a schema of its own on the test
    PostgreSQL server (tests/postgres_support.py), which `parley serve` and the command line are
    given as `--db URL` with `storage.schema` in parley.yaml. `rows` reads it as an operator would."""

    path: Path | None = None
    url: str | None = None
    schema: str | None = None

    @property
    def kind(self) -> str:
        return "postgres" if self.url is not None else "sqlite"

    @property
    def db_arg(self) -> str | None:
        """What `--db` names (None: the SQLite file of parley.yaml)."""
        return self.url

    def storage(self) -> dict[str, Any]:
        """The `storage:` section of parley.yaml."""
        if self.url is not None:
            return {"schema": self.schema}
        return {"path": str(self.path)}

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run SQL written for SQLite (`?` placeholders) on the database."""
        if self.url is None:
            assert self.path is not None
            return db_rows(self.path, query, params)
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema or "public")))
            cur = conn.execute(query.replace("%", "%%").replace("?", "%s").encode(), params)
            return list(cur.fetchall()) if cur.description is not None else []


def open_test_store(path: Path) -> AbstractAsyncContextManager[Store]:
    """The fast layer's store: the real SQLite backend, on a file in the test's tmp_path.

    `synchronous = normal` is sound here: in WAL mode a process that crashes loses no commit (only
    a power loss may lose the last ones, and a test's file does not outlive its test), and it
    spares each commit an fsync. Opening the same path twice is two processes' view of one
    database: one file, separate connections."""
    return open_sqlite_store(path, synchronous="normal")


def tokens_auth(tokens: dict[str, str], scopes: tuple[str, ...] = ("parley:use",)) -> dict[str, Any]:
    """`auth:` of parley.yaml that accepts each bearer token by its name, with `scopes`."""
    from parley.config.auth import token_digest

    return {
        "mode": "tokens",
        "tokens": [{"name": n, "sha256": token_digest(t), "scopes": list(scopes)} for n, t in tokens.items()],
    }


def write_config(
    directory: Path,
    *,
    db_name: str = "parley.db",
    runtime: dict[str, Any] | None = None,
    agents: dict[str, dict[str, Any]] | None = None,
    storage: dict[str, Any] | None = None,
    mcp_servers: dict[str, dict[str, Any]] | None = None,
    database: Database | None = None,
    **sections: Any,
) -> Path:
    """Write parley.yaml (fast timings) and agent files into `directory`; return the config path.

    `storage` and `runtime` add to the defaults (the SQLite file `db_name`, or `database`);
    `mcp_servers` and any other top-level `sections` (e.g. `tasks`) go into parley.yaml as given.
    """
    directory.mkdir(parents=True, exist_ok=True)
    where = database.storage() if database is not None else {"path": db_name}
    config: dict[str, Any] = {
        "storage": {**where, **(storage or {})},
        "runtime": {**FAST_RUNTIME, **(runtime or {})},
        **sections,
    }
    if mcp_servers:
        config["mcp_servers"] = mcp_servers
    path = directory / "parley.yaml"
    path.write_text(yaml.safe_dump(config))
    if agents:
        agents_dir = directory / "configs" / "agents"
        agents_dir.mkdir(parents=True, exist_ok=True)
        for name, body in agents.items():
            (agents_dir / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, **body}))
    return path


def fixture_server(log: Path, *args: str, **settings: Any) -> dict[str, Any]:
    """The parley.yaml entry of our fixture MCP server over stdio (command-line `args`, server
    `settings`), logging every call it runs to `log` (`fixture_calls` reads it)."""
    return {
        "command": FIXTURE_SERVER[0],
        "args": [*FIXTURE_SERVER[1:], *args],
        "cwd": str(REPO),
        "env": {"FIXTURE_LOG": str(log)},
        **settings,
    }


@asynccontextmanager
async def fixture_in_process(log: Path, *args: str, **settings: Any) -> AsyncIterator[dict[str, Any]]:
    """Our fixture MCP server in the test's own process, over streamable HTTP on a loopback port,
    logging every call to `log` as the stdio one does; yields its parley.yaml entry. Its `crash`
    tools refuse (they would kill the test run): a test of a dying server uses `fixture_server`."""
    from tests.mcp_servers.fixture_server import build, parse_args

    async with served_over_http(build(parse_args(list(args)), log, in_process=True)) as url:
        yield {"url": url, **settings}


def fixture_calls(log: Path) -> list[dict[str, Any]]:
    """Every call the fixture server really ran (`{"tool", "arguments"}`), oldest first."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def fixture_runs(directory: Path, tool: str, **arguments: Any) -> int:
    """How often the fixture server logging into `directory` really ran `tool` with these arguments."""
    return sum(
        1 for r in fixture_calls(directory / FIXTURE_LOG) if r["tool"] == tool and r["arguments"] == arguments
    )


@dataclass(frozen=True)
class Gate:
    """A file the fixture server's `gate` tool waits for: a tool call that runs until the test
    opens it, so "while the call runs" never depends on how fast the machine is."""

    path: Path

    def tool_line(self, server: str = "fixture") -> str:
        """The demo-model directive that calls the gate through fixture server `server`."""
        return f"/tool {server}__gate {json.dumps({'path': str(self.path)})}"

    @property
    def passed(self) -> str:
        """The call's result once the gate is open."""
        return f"passed the gate {self.path.name}"

    def open(self) -> None:
        self.path.touch()


class ServerProcess:
    """One `parley serve` process. Use as an async context manager; it is killed on exit."""

    def __init__(
        self,
        config_path: Path,
        *,
        name: str = "server",
        http: bool = False,
        env: dict[str, str] | None = None,
        host: str | None = None,
        db: str | None = None,
        port: int = 0,
        log_level: str = "DEBUG",
        args: tuple[str, ...] = (),
        fault: str | None = None,
    ) -> None:
        """`fault`: POINT[:TEXT], where the process kills itself (python -m parley.testing.serve)."""
        self.config_path = config_path
        self.args = args
        self.http = http
        self.host = host
        self.db = db
        self.port = port
        self.log_level = log_level
        self.extra_env = env or {}
        self.fault = fault
        self.url: str | None = None
        self.log_path = config_path.parent / f"{name}.{os.getpid()}.{id(self)}.log"
        self._process: Process | None = None

    @property
    def process(self) -> Process:
        assert self._process is not None, "the server is not started"
        return self._process

    @property
    def base_url(self) -> str:
        """http://host:port of a server over HTTP (its MCP endpoint is `url`, at /mcp)."""
        assert self.url is not None, "the server is not started over HTTP"
        return self.url.removesuffix("/mcp")

    @property
    def pid(self) -> int:
        return self.process.pid

    async def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.extra_env}
        env.pop("PARLEY_DB", None)
        self._log = self.log_path.open("ab")
        entry = ["-m", "parley.testing.serve", "--fault", self.fault] if self.fault else ["-m", "parley"]
        command = [sys.executable, *entry, "serve", "--config", str(self.config_path)]
        command += ["--log-level", self.log_level] + (["--db", self.db] if self.db else [])
        command += list(self.args)
        if self.http:
            command += ["--http", "--port", str(self.port)] + (["--host", self.host] if self.host else [])
        self._process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env
        )
        if self.http:
            await self._wait_for_url()

    async def _wait_for_url(self) -> None:
        async def listening() -> bool:
            for line in self.log().splitlines():
                if "listening on http://" in line:
                    self.url = line.split("listening on ", 1)[1].strip()
                    return True
            if self.process.returncode is not None:
                raise AssertionError("the HTTP server exited during start-up:\n" + self.log())
            return False

        await eventually(listening, "the HTTP server to listen")

    async def __aenter__(self) -> ServerProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            with anyio.move_on_after(TEST_DEADLINE_S, shield=True):
                await self._process.wait()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def process_id(self) -> str:
        """parley's own process id (proc_...), read from the server's log."""
        for line in self.log().splitlines():
            if " started as " in line:
                return line.split(" started as ", 1)[1].split()[0]
        raise AssertionError("the server has not logged its process id yet:\n" + self.log())

    def transport(self) -> AbstractAsyncContextManager[tuple[Any, Any]]:
        """Read/write streams over the process pipes, for `mcp.Client`."""
        process = self.process
        stdout, stdin = process.stdout, process.stdin
        assert stdout is not None and stdin is not None

        async def read_stdout(to_client: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
            buffer = b""
            async for chunk in stdout:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                        await to_client.send(SessionMessage(msg))

        async def write_stdin(from_client: MemoryObjectReceiveStream[SessionMessage]) -> None:
            async for message in from_client:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await stdin.send(data.encode())

        return message_pump(read_stdout, write_stdin)

    @asynccontextmanager
    async def client(self, mode: str = "auto") -> AsyncIterator[Client]:
        server: Any = self.url if self.http else self.transport()
        async with Client(server, mode=mode) as client:
            # The SDK checks each tool result against the tool's output schema and lists the tools
            # the first time: do it now, so no call of a test depends on a second request (the
            # crash tests' servers die right after answering).
            await client.list_tools()
            yield client

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signal.Signals(signum))

    async def wait_exit(self, timeout_s: float = TEST_DEADLINE_S) -> int:
        with anyio.fail_after(timeout_s):
            return await self.process.wait()


@contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """`variables` set in this process's environment for the block, then restored as they were."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class InProcessServer:
    """`parley serve` in the test's own process (parley.testing's `parley_app`, the same
    composition root), for a module that needs no process of its own: the same `client(mode)`,
    `url`, `base_url`, `log()` and `process_id()` as `ServerProcess`. Without `http` its clients
    are bound in memory (what stdio carries, without the framing); with it they speak
    streamable HTTP to a loopback port, through the real limits and guards."""

    def __init__(
        self,
        config_path: Path,
        *,
        http: bool = False,
        db: str | None = None,
        env: dict[str, str] | None = None,
        port: int = 0,
        model: ModelClient | None = None,
        **_: Any,
    ) -> None:
        """`env`: variables the server reads (API keys, tokens named in parley.yaml), set in this
        process while it runs, as `ServerProcess` gives them to its process; restored after.
        `port`: with `http`, the port to serve on (0: an ephemeral one). `model`: the model every
        agent calls (a `HeldModel`, say), instead of the configured ones."""
        self.config_path = config_path
        self.http = http
        self.db = db
        self.env = env or {}
        self.port = port
        self.model = model
        self.url: str | None = None
        self._stack = AsyncExitStack()
        self._parley: ParleyUnderTest | None = None

    @property
    def parley(self) -> ParleyUnderTest:
        assert self._parley is not None, "the server is not started"
        return self._parley

    @property
    def base_url(self) -> str:
        assert self.url is not None, "the server is not served over HTTP"
        return self.url.removesuffix("/mcp")

    async def __aenter__(self) -> InProcessServer:
        self._stack.enter_context(environment(self.env))
        db: Path | str | None = self.db
        self._parley = await self._stack.enter_async_context(
            parley_app(self.config_path, db=db, directory=self.config_path.parent, model=self.model)
        )
        if self.http:
            self.url = (await self._parley.http(self.port)).url
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    @property
    def pid(self) -> int:
        """This process: the downstream stdio servers parley starts are its children."""
        return os.getpid()

    def log(self) -> str:
        return self.parley.log()

    def process_id(self) -> str:
        return self.parley.app.process_id

    def transport(self) -> AbstractAsyncContextManager[tuple[Any, Any]]:
        """Read/write streams to the app's MCP server in memory, for clients that speak JSON-RPC
        by hand (tests/task_client.py), as `ServerProcess.transport` gives them over stdio."""
        return InMemoryTransport(self.parley.mcp_server)

    @asynccontextmanager
    async def client(self, mode: str = "auto") -> AsyncIterator[Client]:
        if self.http:
            assert self.url is not None
            async with http_mcp_client(self.url, mode=mode) as client:
                await client.list_tools()
                yield client
        else:
            async with self.parley.mcp(mode) as client:
                await client.list_tools()
                yield client


@asynccontextmanager
async def http_mcp_client(url: str, **options: Any) -> AsyncIterator[Client]:
    """`mcp.Client(url, **options)` over an HTTP client on the process's shared TLS context: the
    SDK would build a context for each client (about 50 ms of CPU), and the tests make hundreds."""
    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults
    async with (
        http_client(timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http), **options) as client,
    ):
        yield client


@asynccontextmanager
async def message_pump(
    inbound: Callable[[MemoryObjectSendStream[SessionMessage | Exception]], Awaitable[None]],
    outbound: Callable[[MemoryObjectReceiveStream[SessionMessage]], Awaitable[None]],
) -> AsyncIterator[tuple[Any, Any]]:
    """A client transport made of two pumps: `inbound` sends what the server says to the client,
    `outbound` takes what the client sends to the server. Yields the client's (read, write) streams.

    The server side ending (closed, broken, end of stream) ends the client's reads; the pumps are
    cancelled when the client is done.
    """
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](100)
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage](100)

    async def pump_in() -> None:
        async with to_client:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                await inbound(to_client)

    async def pump_out() -> None:
        try:
            async with from_client:
                await outbound(from_client)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            to_client.close()  # the server is gone: nothing more will arrive either

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_in)
        tg.start_soon(pump_out)
        try:
            yield from_server, to_server
        finally:
            tg.cancel_scope.cancel()
    for stream in (to_client, from_server, to_server, from_client):
        stream.close()


@asynccontextmanager
async def running_server(
    config_path: Path,
    mode: str = "auto",
    name: str = "server",
    http: bool = False,
    db: str | None = None,
    process: bool = False,
) -> AsyncIterator[tuple[Any, Client]]:
    """A parley and one client in `mode`: in this process unless the test needs a `process` of
    its own (signals, stdio framing, a crash)."""
    kind = ServerProcess if process else InProcessServer
    async with kind(config_path, name=name, http=http, db=db) as server, server.client(mode) as client:
        yield server, client


@dataclass
class Served:
    """A `parley serve` that a test module starts once: the process, the directory of its
    parley.yaml (its database, its fixture server's log) and the module's client, if it keeps one."""

    server: ServerProcess | InProcessServer
    directory: Path
    connected: Client | None = None

    @property
    def client(self) -> Client:
        assert self.connected is not None, "this module's server was started without a client"
        return self.connected

    @property
    def db(self) -> Path:
        return self.directory / "parley.db"

    def runs(self, tool: str, **arguments: Any) -> int:
        """How often the fixture server really ran `tool` with these arguments."""
        return fixture_runs(self.directory, tool, **arguments)


ServedT = TypeVar("ServedT", bound=Served)


class ServingOptions(TypedDict, total=False):
    """serving()'s options but the world (see serving)."""

    mode: str | None
    name: str
    http: bool
    clean_log: bool
    process: bool
    model: ModelClient | None


@overload
def serving(config_path: Path, **options: Unpack[ServingOptions]) -> AbstractAsyncContextManager[Served]: ...


@overload
def serving(
    config_path: Path, *, world: type[ServedT], **options: Unpack[ServingOptions]
) -> AbstractAsyncContextManager[ServedT]: ...


def serving(
    config_path: Path, *, world: type[Served] = Served, **options: Unpack[ServingOptions]
) -> AbstractAsyncContextManager[Served]:
    """Start parley on `config_path` (in this process, unless the module needs a `process` of its
    own) and connect one client in `mode` (None: no client, each test connects its own); yield
    them as a `world` (a `Served`, or a module's subclass). `clean_log`: on a normal exit the
    server's log must hold no traceback. `model`: in this process, the model every agent calls."""
    return _serving(config_path, world, **options)


@asynccontextmanager
async def _serving(
    config_path: Path,
    world: type[Served],
    *,
    mode: str | None = "auto",
    name: str = "server",
    http: bool = False,
    clean_log: bool = False,
    process: bool = False,
    model: ModelClient | None = None,
) -> AsyncIterator[Served]:
    kind = ServerProcess if process else InProcessServer
    extra: dict[str, Any] = {} if model is None else {"model": model}
    async with kind(config_path, name=name, http=http, **extra) as server:
        if mode is None:
            yield world(server, config_path.parent)
        else:
            async with server.client(mode) as client:
                yield world(server, config_path.parent, client)
        if clean_log:
            assert "Traceback" not in server.log(), server.log()


async def until_listening(url: str, what: str, check_alive: Callable[[], None] | None = None) -> None:
    """Wait until an HTTP server answers at `url` (any status); `check_alive` may raise meanwhile."""

    async def listening() -> bool:
        if check_alive is not None:
            check_alive()
        try:
            async with http_client() as http:
                await http.get(url)
        except httpx2.TransportError:
            return False
        return True

    await eventually(listening, what)


def db_rows(db_path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the real database file directly (what a second tool or an operator would see)."""
    import sqlite3

    with sqlite3.connect(db_path, timeout=TEST_DEADLINE_S) as conn:
        return list(conn.execute(sql, params).fetchall())


def dumps(value: Any) -> str:
    return json.dumps(value)


async def read_until_closed(stream: SocketStream) -> bytes:
    """Everything the server sends on a raw connection until it closes it (the test deadline)."""
    received = b""
    with anyio.fail_after(TEST_DEADLINE_S):
        try:
            while True:
                received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return received


async def read_response(stream: SocketStream) -> tuple[int, bytes]:
    """The status of the response on a raw connection, and its head with as much of its body as
    its Content-Length says (an event stream has none: its body goes on). The test deadline."""
    received = b""
    with anyio.fail_after(TEST_DEADLINE_S):
        while b"\r\n\r\n" not in received:
            received += await stream.receive()
        head = received.split(b"\r\n\r\n", 1)[0].lower()
        length = next((int(h[15:]) for h in head.split(b"\r\n") if h.startswith(b"content-length:")), 0)
        while len(received) < len(head) + 4 + length:
            received += await stream.receive()
    assert received.startswith(b"HTTP/1.1 "), received
    return int(received[9:12]), received
