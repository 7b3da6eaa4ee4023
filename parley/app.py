"""Composition root: configuration -> store -> runtime -> MCP server. The only module that
names concrete adapters."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import uvicorn
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.mcpserver import MCPServer

from parley import __version__
from parley.config import ModelSpec, ServerConfig, secret_from_env
from parley.errors import StorageError
from parley.ids import new_process_id
from parley.runtime.demo_model import DemoModelClient
from parley.runtime.driver import DriveSettings, SessionDriver
from parley.runtime.faults import FaultPoints
from parley.runtime.mcp.sources import McpToolSources
from parley.runtime.mcp_tasks import McpTaskService
from parley.runtime.model import ModelClient
from parley.runtime.providers.anthropic import AnthropicModelClient
from parley.runtime.providers.openai import OpenAIModelClient
from parley.runtime.scheduler import Scheduler
from parley.runtime.service import SessionService
from parley.runtime.signals import SessionSignals
from parley.runtime.toolbox import Toolbox
from parley.server.client_logs import ClientLogRelay
from parley.server.http import (
    QuietUvicorn,
    bind_listener,
    build_http_app,
    check_bind,
    http_url,
    uvicorn_config,
)
from parley.server.results import as_wire, outcome_result
from parley.server.stdio import run_stdio
from parley.server.tools import LOCAL_PRINCIPAL, build_mcp_server
from parley.storage.ports import Store
from parley.storage.status import StorageStatus
from parley.stores import open_store

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class App:
    service: SessionService
    scheduler: Scheduler
    store: Store
    storage_status: Callable[[], Awaitable[StorageStatus]]
    process_id: str
    sources: McpToolSources
    tasks: McpTaskService

    async def health(self) -> dict[str, Any]:
        # `storage`: how the latest write ended ("ok", "full", "read_only", "busy", "error: ..."),
        # or "unreachable" while a database server does not answer: then the status is
        # "unavailable" (/healthz answers 503), and nothing that needs the database is counted.
        storage = await self.storage_status()
        leased: int | None = None
        if storage.reachable:
            try:
                leased = await self.store.count_leases(self.process_id, time.time())
            except StorageError:
                leased = None  # it went away since the probe; the next report says so
        report: dict[str, Any] = {
            "status": "ok"
            if storage.condition == "ok"
            else "degraded"
            if storage.reachable
            else "unavailable",
            "storage": storage.condition,
            "process_id": self.process_id,
            "running_turns": len(self.scheduler.driving),
            "leased_sessions": leased,
            "downstream_connections": self.sources.open_connections(),
            "downstream_requests": self.sources.requests_in_flight(),
        }
        if storage.details is not None:
            report["database"] = storage.details
        return report


def build_models(config: ServerConfig, http: httpx2.AsyncClient) -> dict[str, ModelClient]:
    """One model client per agent (keys and addresses are per agent), looked up by agent name."""
    demo = DemoModelClient()

    def client(owner: str, spec: ModelSpec) -> ModelClient:
        key = secret_from_env(spec.api_key_env)
        if spec.api_key_env and key is None:
            logger.warning(
                "%s: environment variable %s is not set; its model calls will fail", owner, spec.api_key_env
            )
        if spec.provider == "anthropic":
            return AnthropicModelClient(http, key, spec.base_url)
        if spec.provider == "openai":
            return OpenAIModelClient(http, key, spec.base_url)
        return demo

    models = {name: client(f"agent {name}", agent.model) for name, agent in config.agents.items()}
    # Models a caller may pick by name in session settings.
    models |= {f"catalog:{name}": client(f"model {name}", spec) for name, spec in config.models.items()}
    return models


@asynccontextmanager
async def running_app(config: ServerConfig) -> AsyncIterator[App]:
    """Open the store and run the scheduler for as long as the context is open.

    Leaving the context drains: running steps may finish within the shutdown grace period,
    then every driver stops where it is and releases its lease, so the next process resumes
    the unfinished turns at once.
    """
    clock = time.time
    async with AsyncExitStack() as stack:
        process_id = new_process_id()
        opened = await stack.enter_async_context(open_store(config, origin=process_id))
        store = opened.store
        runtime = config.runtime
        signals = SessionSignals(runtime.poll_interval_s, config.storage.listen_poll_interval_s)
        timings = DriveSettings(
            lease_ttl_s=runtime.lease_ttl_s,
            poll_interval_s=runtime.poll_interval_s,
            max_timer_s=runtime.max_timer_s,
            max_model_attempts=runtime.max_model_attempts,
            model_retry_backoff_s=runtime.model_retry_backoff_s,
            max_concurrent_model_calls=runtime.max_concurrent_model_calls,
            max_concurrent_tool_calls=runtime.max_concurrent_tool_calls,
            max_driven_sessions=runtime.max_driven_sessions,
        )
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=300.0)))
        models = build_models(config, http)
        sources = McpToolSources(config.mcp_servers, __version__)
        toolbox = Toolbox(sources)
        driver = SessionDriver(
            store=store,
            agents=config.agents,
            models=models,
            toolbox=toolbox,
            signals=signals,
            faults=FaultPoints(config.fault),
            catalog=config.models,
            process_id=process_id,
            timings=timings,
            clock=clock,
        )
        scheduler = Scheduler(
            store=store, driver=driver, signals=signals, process_id=process_id, timings=timings, clock=clock
        )
        service = SessionService(
            store=store,
            agents=config.agents,
            signals=signals,
            runtime=config.runtime,
            clock=clock,
            toolbox=toolbox,
            model_names=sorted(config.models),
        )
        tasks = McpTaskService(
            store=store,
            service=service,
            signals=signals,
            clock=clock,
            settings=config.tasks,
            render=lambda outcome: as_wire(outcome_result(outcome)),
        )
        async with anyio.create_task_group() as tg:
            # Other processes' changes wake this one's waits and scheduler (PostgreSQL).
            await tg.start(opened.feed.run, signals)
            await tg.start(sources.run)
            sources.warm_up(ref.server for agent in config.agents.values() for ref in agent.mcp_servers)
            await tg.start(scheduler.run)
            await tg.start(tasks.run_purge)
            await tg.start(tasks.run_watch)
            logger.info("parley %s started as %s on %s", __version__, process_id, opened.label)
            try:
                yield App(
                    service=service,
                    scheduler=scheduler,
                    store=store,
                    storage_status=opened.status,
                    process_id=process_id,
                    sources=sources,
                    tasks=tasks,
                )
            finally:
                with anyio.CancelScope(shield=True):
                    await scheduler.drain(config.runtime.shutdown_grace_s)
                tg.cancel_scope.cancel()
        logger.info("parley %s stopped", process_id)


def _state_keys(config: ServerConfig) -> list[str] | None:
    raw = secret_from_env(config.http.request_state_keys_env)
    if config.http.request_state_keys_env and not raw:
        logger.warning(
            "%s is not set; input-required rounds use a key of this process only",
            config.http.request_state_keys_env,
        )
    return [k.strip() for k in raw.split(",") if k.strip()] if raw else None


async def _mcp_server(config: ServerConfig, app: App, background: TaskGroup) -> MCPServer[Any]:
    """The MCP server. `background` runs what outlives a request (task status pushes, the relay of
    log records to clients) until it is cancelled."""

    def owner_of(ctx: Any) -> str:
        return LOCAL_PRINCIPAL

    logs = ClientLogRelay(owner_of, background)
    await background.start(logs.run)
    return build_mcp_server(
        app.service,
        owner_of,
        __version__,
        _state_keys(config),
        tasks=app.tasks,
        watchers=background,
        logs=logs,
    )


async def _on_signal(stop: Callable[[], None], *, task_status: TaskStatus[None]) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            logger.info("received %s; shutting down", signal.Signals(signum).name)
            stop()
            return


async def serve_stdio(config: ServerConfig, ready_hint: str | None = None) -> None:
    """Serve over stdio until stdin closes or a signal arrives; `ready_hint` goes to stderr once listening."""
    async with running_app(config) as app, anyio.create_task_group() as tg:
        server = await _mcp_server(config, app, tg)
        await tg.start(_on_signal, tg.cancel_scope.cancel)
        if ready_hint:
            sys.stderr.write(ready_hint)
            sys.stderr.flush()
        await run_stdio(server, config.http.max_request_bytes)
        logger.info("stdin closed; shutting down")
        tg.cancel_scope.cancel()


async def serve_http(
    config: ServerConfig,
    host: str,
    port: int,
    insecure_bind: bool,
    on_listening: Callable[[str, int], Awaitable[None]] | None = None,
) -> None:
    check_bind(host, insecure_bind)
    # Bound before the store opens, so a port in use is reported before anything starts.
    listener = bind_listener(host, port)
    with listener:
        async with running_app(config) as app, anyio.create_task_group() as tg:
            server = await _mcp_server(config, app, tg)
            uv = QuietUvicorn(
                uvicorn_config(build_http_app(server, host, app.health, config.http), config.http)
            )

            def stop() -> None:
                uv.should_exit = True

            await tg.start(_on_signal, stop)
            tg.start_soon(_announce, uv, listener, on_listening)
            await uv.serve(sockets=[listener])
            tg.cancel_scope.cancel()


async def _announce(
    uv: uvicorn.Server, listener: socket.socket, on_listening: Callable[[str, int], Awaitable[None]] | None
) -> None:
    # uvicorn exposes only a flag for "listening"; there is no event to await.
    while not uv.started:  # noqa: ASYNC110
        await anyio.sleep(0.05)
    host, port = listener.getsockname()[:2]
    logger.info("listening on %s", http_url(host, port))
    if on_listening is not None:
        await on_listening(host, port)
