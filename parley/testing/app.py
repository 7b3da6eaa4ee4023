"""The whole of parley in the test's own process: the composition root of `parley serve`, on
SQLite in a temporary folder unless told otherwise, with clients bound to it in memory (MCP) and
over a real loopback socket (HTTP: /mcp, /v1, /ui, /metrics and the auth gate)."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import yaml
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client
from mcp.server.mcpserver import MCPServer

from parley.app import App, Seams, mcp_server, running_app
from parley.app_http import check_http, serve_app_http
from parley.config import ServerConfig, load_config
from parley.runtime.faults import FaultPoints
from parley.runtime.log_format import library_log_levels
from parley.runtime.model import ModelClient
from parley.sdk_compat import InMemoryTransport  # the SDK's in-memory pairing; Client(server) drops progress
from parley.server.http import bind_listener
from parley.testing.clock import ManualClock
from parley.testing.waiting import DEADLINE_S
from parley.tls import http_client

# Timings that make a test's turns, leases and waits quick (parley.yaml's `runtime:`).
FAST_RUNTIME: dict[str, Any] = {
    "poll_interval_s": 0.1,
    "lease_ttl_s": 1.0,
    "default_wait_s": DEADLINE_S,
    "max_wait_s": DEADLINE_S,
    "shutdown_grace_s": 1.0,
    "progress_interval_s": 0.2,
}

ConfigSource = ServerConfig | Path | str | Mapping[str, Any] | None


@dataclass
class HttpEndpoint:
    """The app served over HTTP in this process: `url` is /mcp, `base_url` the rest."""

    base_url: str

    @property
    def url(self) -> str:
        return self.base_url + "/mcp"

    def client(self, token: str | None = None, **options: Any) -> httpx2.AsyncClient:
        """An HTTP client for /v1, /ui, /metrics and /healthz, with `token` as its bearer."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return http_client(base_url=self.base_url, headers=headers, timeout=DEADLINE_S, **options)


@dataclass
class ParleyUnderTest:
    """A running parley: its `app` (service, store...), its configuration and folder, and the
    ways in. Made by `parley_app`; usable only inside it."""

    app: App
    config: ServerConfig
    directory: Path
    _mcp: MCPServer[Any]
    _tasks: TaskGroup
    _log: list[str]
    _clock: ManualClock | None
    _http: HttpEndpoint | None = None
    _stop_http: anyio.Event = field(default_factory=anyio.Event)
    _http_stopped: anyio.Event = field(default_factory=anyio.Event)
    _marker: object = None

    @property
    def mcp_server(self) -> MCPServer[Any]:
        """The app's MCP server, for a client of your own (mcp.Client(parley.mcp_server))."""
        return self._mcp

    @asynccontextmanager
    async def mcp(self, mode: str = "auto") -> AsyncIterator[Client]:
        """An MCP client bound to this parley in memory: `legacy` speaks 2025-11-25 (initialize),
        `auto` the newest generation both sides know; the caller is the local user. Its messages
        go over JSON-RPC streams as over stdio, so progress and other notifications arrive."""
        async with Client(InMemoryTransport(self._mcp), mode=mode) as client:
            yield client

    async def http(self, port: int = 0) -> HttpEndpoint:
        """Serve this parley over HTTP on an ephemeral loopback port, or on `port` (once; later
        calls return the same endpoint), through the same app, limits and auth gate as
        `parley serve --http`."""
        if self._http is None:
            host = self.config.http.host if self.config.http.host != "0.0.0.0" else "127.0.0.1"
            check_http(self.config, host, insecure_bind=False)
            listener = bind_listener(host, port)
            listening = anyio.Event()

            async def announced(bound_host: str, port: int) -> None:
                listening.set()

            async def serve() -> None:
                _WORKS_FOR.set(self._marker)
                try:
                    with listener:
                        await serve_app_http(
                            self.config, self.app, listener, self._stop_http, announced, host
                        )
                finally:
                    self._http_stopped.set()

            bound_host, port = listener.getsockname()[:2]
            self._tasks.start_soon(serve)
            with anyio.fail_after(DEADLINE_S):
                await listening.wait()
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            self._http = HttpEndpoint(f"http://{shown}:{port}")
        return self._http

    async def _stop_serving(self) -> None:
        """HTTP stops first, as `parley serve` stops it: uvicorn ends its lifespan before the app drains."""
        self._stop_http.set()
        if self._http is not None:
            with anyio.move_on_after(DEADLINE_S, shield=True):
                await self._http_stopped.wait()

    def advance(self, seconds: float) -> None:
        """Move the clock (parley_app(clock=ManualClock())) and wake the scheduler, so what is due
        now (a durable wait, a deadline) happens without waiting it out."""
        if self._clock is None:
            raise RuntimeError("parley_app was started on the real clock: pass clock=ManualClock()")
        self._clock.advance(seconds)
        self.app.signals.everything_changed()

    def log(self, without: tuple[str, ...] = ()) -> str:
        """What parley logged while it ran, one line a record (level, logger, message). `without`:
        leave out the records of these loggers and their children (e.g. "mcp.client": in the test's
        process, the test's own MCP clients log beside parley)."""
        return "\n".join(line for line in self._log if not _logged_by(line, without))


@asynccontextmanager
async def parley_app(
    config: ConfigSource = None,
    *,
    db: Path | str | None = None,
    agents: Mapping[str, Mapping[str, Any]] | None = None,
    directory: Path | None = None,
    model: ModelClient | None = None,
    clock: ManualClock | Callable[[], float] | None = None,
    faults: FaultPoints | None = None,
) -> AsyncIterator[ParleyUnderTest]:
    """Run parley in this process for as long as the context is open.

    `config`: a loaded `ServerConfig`, the path of a parley.yaml, or what a parley.yaml would hold
    (a mapping; fast runtime timings are added under it); None: the embedded defaults.
    `db`: a SQLite file or a PostgreSQL URL instead of the configured store (default: parley.db in
    `directory`, a temporary folder unless given). `agents`: agent files to write (name -> fields)
    beside a mapping config. `model`: the model every agent calls (a `ScriptedModel`), instead of
    the configured providers. `clock`: a `ManualClock` the test moves. `faults`: armed fault points.
    """
    async with AsyncExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="parley-test-")))
        loaded = _load(config, directory, agents, db)
        log = stack.enter_context(_captured_log())
        seams = Seams(
            clock=clock or Seams().clock,
            model=model,
            faults=faults or FaultPoints(),
        )
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)
        host = _Host(loaded, seams, log.marker)
        app, server, own = await tasks.start(host.run)
        under_test = ParleyUnderTest(
            app, loaded, directory, server, own, log.lines, clock if isinstance(clock, ManualClock) else None
        )
        under_test._marker = log.marker
        try:
            yield under_test
        finally:
            await under_test._stop_serving()
            await host.stop()


# Which in-process parley a task works for: its records go to that parley's log only, so two
# parleys in one test do not read each other's lines. Unmarked records (the test's own, and what
# an in-memory client's server does in the client's task) go to every parley's log.
_WORKS_FOR: ContextVar[object | None] = ContextVar("parley_testing_works_for", default=None)


class _Host:
    """Runs the app in a task of its own, marked as working for this parley."""

    def __init__(self, config: ServerConfig, seams: Seams, marker: object) -> None:
        self._config = config
        self._seams = seams
        self._marker = marker
        self._stop = anyio.Event()
        self._stopped = anyio.Event()

    async def run(self, *, task_status: TaskStatus[tuple[App, MCPServer[Any], TaskGroup]]) -> None:
        _WORKS_FOR.set(self._marker)
        try:
            async with running_app(self._config, seams=self._seams) as app, anyio.create_task_group() as own:
                server = await mcp_server(self._config, app, own)
                task_status.started((app, server, own))
                await self._stop.wait()
                own.cancel_scope.cancel()
        finally:
            self._stopped.set()

    async def stop(self) -> None:
        """Drain and stop the app as `parley serve` does on SIGTERM."""
        self._stop.set()
        with anyio.CancelScope(shield=True):
            await self._stopped.wait()


def write_config(
    directory: Path, config: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]] | None = None
) -> Path:
    """Write parley.yaml (with fast runtime timings under what `config` sets) and agent files
    into `directory`; return the path of parley.yaml."""
    directory.mkdir(parents=True, exist_ok=True)
    body = dict(config)
    body["runtime"] = {**FAST_RUNTIME, **dict(body.get("runtime") or {})}
    body.setdefault("storage", {"path": "parley.db"})
    path = directory / "parley.yaml"
    path.write_text(yaml.safe_dump(body))
    if agents:
        folder = directory / "configs" / "agents"
        folder.mkdir(parents=True, exist_ok=True)
        for name, fields in agents.items():
            (folder / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, **dict(fields)}))
    return path


def _load(
    config: ConfigSource,
    directory: Path,
    agents: Mapping[str, Mapping[str, Any]] | None,
    db: Path | str | None,
) -> ServerConfig:
    if isinstance(config, ServerConfig):
        if agents or db is not None:
            raise ValueError("agents= and db= go with a parley.yaml or a mapping, not a loaded ServerConfig")
        return config
    if isinstance(config, Path | str):
        if agents:
            raise ValueError("agents= goes with a mapping config; put agent files beside your parley.yaml")
        return load_config(Path(config), db)
    return load_config(write_config(directory, config or {}, agents), db)


def _logged_by(line: str, loggers: tuple[str, ...]) -> bool:
    """Whether the record `line` ("LEVEL name: message") comes from one of `loggers` or a child."""
    parts = line.split(" ", 2)
    name = parts[1].removesuffix(":") if len(parts) > 1 else ""
    return any(name == logger or name.startswith(logger + ".") for logger in loggers)


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.marker = object()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        works_for = _WORKS_FOR.get()
        if works_for is None or works_for is self.marker:
            self.lines.append(self.format(record))


@contextmanager
def _captured_log() -> Iterator[_ListHandler]:
    """Every log record while the app runs, as `parley serve --log-level DEBUG` writes them to
    stderr: parley's and its libraries' (the SDK, uvicorn, httpx2), with the same libraries
    kept quieter. Put back as it was afterwards."""
    handler = _ListHandler()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    libraries = library_log_levels(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for name, before in libraries.items():
            logging.getLogger(name).setLevel(before)
