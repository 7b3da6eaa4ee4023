"""Composition root: configuration -> store -> runtime -> MCP server. The only module that
names concrete adapters."""

from __future__ import annotations

import gc
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.mcpserver import MCPServer

from parley import __version__
from parley.config import ModelSpec, ServerConfig, secret_from_env
from parley.config.codes import ConfigNote
from parley.core.ids import new_process_id
from parley.errors import StorageError
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.agent_reload import AgentReloader
from parley.runtime.attachments import run_collect
from parley.runtime.demo_model import DemoModelClient
from parley.runtime.driver import DriveSettings, SessionDriver
from parley.runtime.faults import FaultPoints
from parley.runtime.mcp.sources import McpToolSources
from parley.runtime.mcp_tasks import McpTaskService
from parley.runtime.metrics import RuntimeMetrics
from parley.runtime.model import ModelClient
from parley.runtime.model_titles import ModelTitles
from parley.runtime.oauth.flows import OAuthFlows, build_oauth
from parley.runtime.providers.anthropic import AnthropicModelClient
from parley.runtime.providers.openai import OpenAIModelClient
from parley.runtime.retention import RetentionSweep
from parley.runtime.scheduler import Scheduler
from parley.runtime.schedules import ScheduleRunner, check_schedule_names
from parley.runtime.service import ServiceOptions, SessionService
from parley.runtime.session_events import EventWatch, SessionEvents
from parley.runtime.signals import SessionSignals
from parley.runtime.toolbox import Toolbox
from parley.runtime.tracing import Tracing
from parley.runtime.webhooks import WebhookWorker, routes_of
from parley.server.auth_gate import caller_of
from parley.server.client_logs import ClientLogRelay
from parley.server.results import as_wire, outcome_result
from parley.server.stdio import run_stdio
from parley.server.tools import build_mcp_server
from parley.storage.ports import Store
from parley.storage.status import StorageStatus
from parley.stores import OpenedStore, open_store
from parley.tls import http_client

logger = logging.getLogger(__name__)

# How long running steps may go on once stdin closed (the client left): they are abandoned
# uncommitted after it and resumed by the next process. parley aims to be gone within a second
# (the SDK's stdio client kills a server 2 s after closing its stdin), and the rest of the exit,
# Python's own teardown included, takes 0.1-0.3 s on a busy machine.
CLIENT_GONE_GRACE_S = 0.1


@dataclass(slots=True)
class ShutdownPlan:
    """How long the drain at the end of `running_app` lets running steps finish: the configured
    grace, shortened by a serve loop whose client left."""

    grace_s: float


@dataclass(frozen=True, slots=True)
class Seams:
    """What may be swapped in the composition root without changing its wiring. `parley serve`
    takes the defaults; parley.testing swaps them (a clock a test moves, a scripted model, armed
    fault points)."""

    clock: Callable[[], float] = time.time
    # Every model call goes to this one instead of the configured providers.
    model: ModelClient | None = None
    faults: FaultPoints = field(default_factory=FaultPoints)


@dataclass(frozen=True, slots=True)
class App:
    service: SessionService
    scheduler: Scheduler
    store: Store
    storage_status: Callable[[], Awaitable[StorageStatus]]
    process_id: str
    sources: McpToolSources
    tasks: McpTaskService
    events: SessionEvents
    metrics: RuntimeMetrics
    shutdown: ShutdownPlan
    signals: SessionSignals
    clock: Callable[[], float]
    # Starts the sessions of schedules' ticks (runtime/schedules.py).
    schedules: ScheduleRunner
    # Outbound webhooks' delivery worker (None: no webhooks configured).
    webhooks: WebhookWorker | None = None
    # OAuth to downstream servers with auth user_oauth (None: no server has it).
    oauth: OAuthFlows | None = None

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


class ModelClients:
    """The model client of each spec (provider, address, key variable), made on first use and kept:
    agents that change while the server runs, and earlier versions that turns still run on, may
    name a model no agent named at start."""

    def __init__(self, http: httpx2.AsyncClient, every: ModelClient | None = None) -> None:
        self._http = http
        self._every = every
        self._demo = DemoModelClient()
        self._clients: dict[tuple[str, str | None, str | None], ModelClient] = {}

    def __call__(self, spec: ModelSpec, owner: str = "a turn") -> ModelClient:
        if self._every is not None:
            return self._every
        if spec.provider not in ("anthropic", "openai"):
            return self._demo
        found = self._clients.get((spec.provider, spec.base_url, spec.api_key_env))
        if found is not None:
            return found
        key = secret_from_env(spec.api_key_env)
        if spec.api_key_env and key is None:
            logger.warning(
                "%s: environment variable %s is not set; its model calls will fail", owner, spec.api_key_env
            )
        client: ModelClient = (
            AnthropicModelClient(self._http, key, spec.base_url)
            if spec.provider == "anthropic"
            else OpenAIModelClient(self._http, key, spec.base_url)
        )
        self._clients[(spec.provider, spec.base_url, spec.api_key_env)] = client
        return client


def build_models(
    config: ServerConfig, http: httpx2.AsyncClient, every: ModelClient | None = None
) -> ModelClients:
    """The model clients, those of the configured agents and models made now (so a missing key
    is reported at start); `every`: the one client of every call instead."""
    models = ModelClients(http, every)
    for name, agent in config.agents.items():
        models(agent.model, f"agent {name}")
    # Models a caller may pick by name in session settings.
    for name, spec in config.models.items():
        models(spec, f"model {name}")
    return models


def _drive_settings(config: ServerConfig) -> DriveSettings:
    runtime = config.runtime
    return DriveSettings(
        lease_ttl_s=runtime.lease_ttl_s,
        poll_interval_s=runtime.poll_interval_s,
        max_timer_s=runtime.max_timer_s,
        max_model_attempts=runtime.max_model_attempts,
        model_retry_backoff_s=runtime.model_retry_backoff_s,
        max_concurrent_model_calls=runtime.max_concurrent_model_calls,
        max_concurrent_tool_calls=runtime.max_concurrent_tool_calls,
        max_driven_sessions=runtime.max_driven_sessions,
        public_base=config.http.public_base,
    )


def _agent_reloader(
    config: ServerConfig, agents: AgentCatalog, sources: McpToolSources
) -> AgentReloader | None:
    """What watches the agent files for edits (None: nothing to watch, or reloading is off); the
    servers of agents that appear are warmed up as at start."""
    if config.config_path is None or config.runtime.agent_reload_s <= 0:
        return None
    return AgentReloader(
        config.config_path,
        agents,
        config.agent_files,
        config.mcp_servers,
        config.runtime.agent_reload_s,
        on_reload=lambda now: sources.warm_up(r.server for a in now.values() for r in a.mcp_servers),
    )


@dataclass(frozen=True, slots=True)
class _Wired:
    """The app and what `running_app` starts besides it: the live views' watch of other
    processes' commits, the titles by a model and the agent catalog (for the reloader)."""

    app: App
    watch: EventWatch
    titles: ModelTitles
    agents: AgentCatalog


def _log_agent_notices(config: ServerConfig) -> None:
    """What the agent files ask that parley serves differently, said once at start."""
    for notice in config.agent_notices:
        level = logging.INFO if isinstance(notice, ConfigNote) else logging.WARNING
        logger.log(level, "%s", notice)


def _session_service(
    config: ServerConfig,
    store: Store,
    agents: AgentCatalog,
    signals: SessionSignals,
    toolbox: Toolbox,
    titles: ModelTitles,
    clock: Callable[[], float],
    faults: FaultPoints,
) -> SessionService:
    return SessionService.build(
        store=store,
        agents=agents,
        signals=signals,
        clock=clock,
        toolbox=toolbox,
        options=ServiceOptions(
            runtime=config.runtime,
            model_names=sorted(config.models),
            limits=config.limits.for_auth(config.auth.mode),
            attachments=config.attachments,
            titles=titles,
            faults=faults,
            schedules=config.schedules,
        ),
    )


def _wire(
    config: ServerConfig,
    opened: OpenedStore,
    models: ModelClients,
    process_id: str,
    tracing: Tracing | None,
    seams: Seams,
) -> _Wired:
    """The runtime and the services on the open store, nothing started yet."""
    store, clock = opened.store, seams.clock
    signals = SessionSignals(config.runtime.poll_interval_s, config.storage.listen_poll_interval_s)
    timings = _drive_settings(config)
    oauth = build_oauth(config, store, signals, process_id, clock)
    sources = McpToolSources(
        config.mcp_servers, __version__, tokens=oauth.auth if oauth is not None else None
    )
    toolbox = Toolbox(sources, oauth)
    agents = AgentCatalog(config.agents, store)
    metrics = RuntimeMetrics()
    driver = SessionDriver(
        store=store,
        agents=agents,
        models=models,
        toolbox=toolbox,
        signals=signals,
        faults=seams.faults,
        catalog=config.models,
        process_id=process_id,
        timings=timings,
        clock=clock,
        tracing=tracing,
        metrics=metrics,
    )
    scheduler = Scheduler(
        store=store, driver=driver, signals=signals, process_id=process_id, timings=timings, clock=clock
    )
    titles = ModelTitles(store, models, clock)
    service = _session_service(config, store, agents, signals, toolbox, titles, clock, seams.faults)
    tasks = McpTaskService(
        store=store,
        service=service,
        signals=signals,
        clock=clock,
        settings=config.tasks,
        render=lambda outcome: as_wire(outcome_result(outcome)),
    )
    # Live views' wake-ups for what other processes commit (one query per interval for all).
    watch = EventWatch(store, signals, config.runtime.poll_interval_s)
    # Decisions write the deliveries of their events from now on (the outbox).
    store.route_webhooks(routes_of(config.webhooks))
    webhooks = (
        WebhookWorker(store, config.webhooks, process_id, clock, metrics, config.runtime.poll_interval_s)
        if config.webhooks
        else None
    )
    app = App(
        service=service,
        scheduler=scheduler,
        store=store,
        storage_status=opened.status,
        process_id=process_id,
        sources=sources,
        tasks=tasks,
        events=SessionEvents(store, signals, watch),
        metrics=metrics,
        shutdown=ShutdownPlan(config.runtime.shutdown_grace_s),
        signals=signals,
        clock=clock,
        webhooks=webhooks,
        schedules=ScheduleRunner(service.schedules, store, clock),
        oauth=oauth,
    )
    return _Wired(app, watch, titles, agents)


async def _start(
    tg: TaskGroup, config: ServerConfig, opened: OpenedStore, wired: _Wired, schedules: bool
) -> None:
    """Start the background work in `tg`: the change feed, the tool sources, the watch, the
    scheduler, the schedule runner (unless `schedules` is False), then the housekeeping."""
    app = wired.app
    # Other processes' changes wake this one's waits and scheduler (PostgreSQL).
    await tg.start(opened.feed.run, app.signals)
    await tg.start(app.sources.run)
    if app.oauth is not None and app.oauth.loopback is not None:
        # No public URL: connect links and the callback are served on 127.0.0.1 (imported here:
        # only such a process loads the HTTP stack for it).
        from parley.server.oauth_loopback import serve_loopback

        await tg.start(serve_loopback, app.oauth)
    await tg.start(wired.watch.run)
    app.sources.warm_up(ref.server for agent in config.agents.values() for ref in agent.mcp_servers)
    await tg.start(app.scheduler.run)
    if schedules:
        await tg.start(app.schedules.run)
    await _start_housekeeping(tg, app, config, wired.titles, wired.agents)


@asynccontextmanager
async def running_app(
    config: ServerConfig,
    tracing: Tracing | None = None,
    seams: Seams | None = None,
    *,
    schedules: bool = True,
) -> AsyncIterator[App]:
    """Open the store and run the scheduler for as long as the context is open; `schedules`:
    start schedules' sessions too (`parley eval` and `parley replay` do not).

    Leaving the context drains: running steps may finish within the shutdown grace period,
    then every driver stops where it is and releases its lease, so the next process resumes
    the unfinished turns at once.
    """
    seams = seams or Seams()
    _log_agent_notices(config)
    async with AsyncExitStack() as stack:
        process_id = new_process_id()
        opened = await stack.enter_async_context(open_store(config, origin=process_id))
        # Before anything is built on the store: nothing is left half made when it refuses.
        await check_schedule_names(
            list(config.schedules), opened.store, str(config.config_path or "parley.yaml")
        )
        http = await stack.enter_async_context(http_client(timeout=httpx2.Timeout(30.0, read=300.0)))
        wired = _wire(config, opened, build_models(config, http, seams.model), process_id, tracing, seams)
        app = wired.app
        async with anyio.create_task_group() as tg:
            await _start(tg, config, opened, wired, schedules)
            logger.info("parley %s started as %s on %s", __version__, process_id, opened.label)
            try:
                yield app
            finally:
                stopping = time.monotonic()
                with anyio.CancelScope(shield=True):
                    await app.scheduler.drain(app.shutdown.grace_s)
                # Drivers release their leases as they stop, and each downstream stdio server
                # is sent SIGTERM by its own connection's task, all at once.
                tg.cancel_scope.cancel()
        # How long the stop took tells a slow exit's cause from the log: steps, or the rest.
        logger.info("parley %s stopped in %.2fs", process_id, time.monotonic() - stopping)


async def _start_housekeeping(
    tg: TaskGroup, app: App, config: ServerConfig, titles: ModelTitles, agents: AgentCatalog
) -> None:
    """The process's background work besides driving sessions: MCP tasks' expiry and watch, the
    audit's and attachments' purges, retention, titles by a model, and agent files' reload."""
    store, clock = app.store, app.clock
    await tg.start(app.tasks.run_purge)
    await tg.start(app.tasks.run_watch)
    await tg.start(
        app.service.audit.run_purge, config.audit.retention_days * 86_400, config.audit.purge_interval_s
    )
    await tg.start(run_collect, store, clock, config.attachments)
    await tg.start(RetentionSweep(store, config.retention, clock, app.signals).run)
    await tg.start(titles.run)
    if app.webhooks is not None:
        await tg.start(app.webhooks.run)
    reloader = _agent_reloader(config, agents, app.sources)
    if reloader is not None:
        await tg.start(reloader.run)


def _state_keys(config: ServerConfig) -> list[str] | None:
    raw = secret_from_env(config.http.request_state_keys_env)
    if config.http.request_state_keys_env and not raw:
        logger.warning(
            "%s is not set; input-required rounds use a key of this process only",
            config.http.request_state_keys_env,
        )
    return [k.strip() for k in raw.split(",") if k.strip()] if raw else None


async def mcp_server(config: ServerConfig, app: App, background: TaskGroup) -> MCPServer[Any]:
    """The MCP server. `background` runs what outlives a request (task status pushes, the relay of
    log records to clients) until it is cancelled."""

    def owner_of(ctx: Any) -> str:
        return caller_of(ctx).id

    logs = ClientLogRelay(owner_of, background)
    await background.start(logs.run)
    return build_mcp_server(
        app.service,
        caller_of,
        __version__,
        _state_keys(config),
        tasks=app.tasks,
        watchers=background,
        logs=logs,
    )


def freeze_startup_heap() -> None:
    """Take what start-up built (modules, schemas, the config, the composition root) out of the
    cyclic garbage collector's sight. It lives as long as the process, yet each full collection
    walked all of it again: about 120,000 objects, some 45 ms with the event loop stopped, every
    500 to 1,000 turns (bench/gc_cost.py). A frozen object later dropped in a reference cycle is
    never collected, so this is for a process that serves one app until it exits, and the most it
    can keep is what start-up built (downstream connections open later, on first use)."""
    gc.collect()
    gc.freeze()


async def on_signal(stop: Callable[[], None], *, task_status: TaskStatus[None]) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            logger.info("received %s; shutting down", signal.Signals(signum).name)
            stop()
            return


async def serve_stdio(
    config: ServerConfig,
    ready_hint: str | None = None,
    *,
    tracing: Tracing | None = None,
    seams: Seams | None = None,
) -> None:
    """Serve over stdio until stdin closes or a signal arrives; `ready_hint` goes to stderr once listening."""
    async with running_app(config, tracing, seams) as app, anyio.create_task_group() as tg:
        server = await mcp_server(config, app, tg)
        await tg.start(on_signal, tg.cancel_scope.cancel)
        if app.oauth is not None and app.oauth.loopback is None:
            # The links point at http.public_url: a parley served over HTTP there completes them.
            logger.warning(
                "connect links of user_oauth servers go to http.public_url, which a parley served over "
                "HTTP there (parley serve --http) must answer; without public_url they are served on 127.0.0.1"
            )
        freeze_startup_heap()
        if ready_hint:
            sys.stderr.write(ready_hint)
            sys.stderr.flush()
        gone = anyio.Event()

        def client_gone() -> None:
            logger.info("stdin closed; answering what was asked, then shutting down")
            gone.set()
            app.service.waits.end_waits()
            app.shutdown.grace_s = min(app.shutdown.grace_s, CLIENT_GONE_GRACE_S)

        await run_stdio(server, config.http.max_request_bytes, client_gone)
        if not gone.is_set():  # input from a regular file, read by the SDK's own reader
            client_gone()
        tg.cancel_scope.cancel()
