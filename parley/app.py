"""Composition root: configuration -> store -> runtime -> MCP server. The only module that
names concrete adapters."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from parley import __version__
from parley.config import ServerConfig
from parley.ids import new_process_id
from parley.runtime.demo_model import DemoModelClient
from parley.runtime.driver import DriverTimings, SessionDriver
from parley.runtime.model import ModelClient
from parley.runtime.scheduler import Scheduler
from parley.runtime.service import SessionService
from parley.runtime.signals import SessionSignals
from parley.server.stdio import run_stdio
from parley.server.tools import LOCAL_PRINCIPAL, build_mcp_server
from parley.storage.sqlite import SqliteStore, open_sqlite_store

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class App:
    service: SessionService
    scheduler: Scheduler
    store: SqliteStore
    process_id: str


@asynccontextmanager
async def running_app(config: ServerConfig) -> AsyncIterator[App]:
    """Open the store and run the scheduler for as long as the context is open.

    Leaving the context stops every driver where it is; their leases are released so the
    next process resumes the unfinished turns at once.
    """
    clock = time.time
    async with open_sqlite_store(config.db_path) as store:
        signals = SessionSignals()
        process_id = new_process_id()
        timings = DriverTimings(
            lease_ttl_s=config.runtime.lease_ttl_s, poll_interval_s=config.runtime.poll_interval_s
        )
        models: dict[str, ModelClient] = {"demo": DemoModelClient()}
        driver = SessionDriver(
            store=store,
            agents=config.agents,
            models=models,
            signals=signals,
            process_id=process_id,
            timings=timings,
            clock=clock,
        )
        scheduler = Scheduler(
            store=store, driver=driver, signals=signals, process_id=process_id, timings=timings, clock=clock
        )
        service = SessionService(
            store=store, agents=config.agents, signals=signals, runtime=config.runtime, clock=clock
        )
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            logger.info("parley %s started as %s on %s", __version__, process_id, config.db_path)
            try:
                yield App(service=service, scheduler=scheduler, store=store, process_id=process_id)
            finally:
                tg.cancel_scope.cancel()


async def _cancel_on_signal(scope: anyio.CancelScope, *, task_status: TaskStatus[None]) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            logger.info("received %s; shutting down", signal.Signals(signum).name)
            scope.cancel()
            return


async def serve_stdio(config: ServerConfig, ready_hint: str | None = None) -> None:
    """Serve over stdio; `ready_hint` is written to stderr once the server listens."""
    async with running_app(config) as app:
        server = build_mcp_server(app.service, lambda ctx: LOCAL_PRINCIPAL, __version__)
        async with anyio.create_task_group() as tg:
            await tg.start(_cancel_on_signal, tg.cancel_scope)
            if ready_hint:
                sys.stderr.write(ready_hint)
                sys.stderr.flush()
            await run_stdio(server)
            logger.info("stdin closed; shutting down")
            tg.cancel_scope.cancel()
