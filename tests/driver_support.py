"""What the fast tests of the driver share: a session as start_session leaves it, one drive of it
by a `SessionDriver` on a scripted model, and a service on the same store (in process, no
subprocess; the driver's own limits tests in test_driver_limits.py predate these)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anyio

from parley.config import AgentConfig, RuntimeConfig
from parley.core.ids import SessionId, new_session_id
from parley.core.records import QueuedMessageRecord, SessionRecord
from parley.core.transitions import starting
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.driver import DriveSettings, SessionDriver
from parley.runtime.model import ModelClient
from parley.runtime.service import ServiceOptions, SessionService, Waiting
from parley.runtime.signals import SessionSignals
from parley.runtime.toolbox import Toolbox
from parley.storage.ports import Store
from tests.store_support import try_acquire_lease
from tests.support import TEST_DEADLINE_S

LEASE_TTL_S = 30.0
# How the service's calls wait here: not at all (no scheduler runs the turns).
NO_WAIT = Waiting(seconds=0)

Agents = AgentCatalog | Mapping[str, AgentConfig]


async def started_session(
    store: Store, agent: str, text: str, *, settings: dict[str, Any] | None = None
) -> SessionId:
    """A chat session of the local user with its first message queued, as start_session leaves it."""
    now = time.time()
    sid = new_session_id()
    record = SessionRecord.new(sid, agent=agent, owner="local", kind="chat", now=now, settings=settings)
    first = QueuedMessageRecord.new(sid, text, now=now)
    await store.create_session(starting(record, first), first, now)
    return sid


async def drive(
    store: Store, agents: Agents, model: ModelClient, sid: SessionId, proc: str = "proc_test"
) -> None:
    """Take the session's lease as process `proc` and work it until it rests (or parks)."""
    driver = SessionDriver(
        store=store,
        agents=_catalog(agents, store),
        models=lambda spec: model,
        toolbox=Toolbox(None),
        signals=SessionSignals(),
        process_id=proc,
        timings=DriveSettings(lease_ttl_s=LEASE_TTL_S, poll_interval_s=0.05),
        clock=time.time,
    )
    lease = await try_acquire_lease(store, sid, proc, time.time(), LEASE_TTL_S)
    assert lease is not None
    with anyio.fail_after(TEST_DEADLINE_S):
        await driver.drive(sid, lease)


def service(store: Store, agents: Agents) -> SessionService:
    """The session service on `store`; its calls return at once (no scheduler runs the turns)."""
    return SessionService.build(
        store=store,
        agents=_catalog(agents, store),
        signals=SessionSignals(),
        clock=time.time,
        toolbox=Toolbox(None),
        options=ServiceOptions(runtime=RuntimeConfig(default_wait_s=0, max_wait_s=0)),
    )


def _catalog(agents: Agents, store: Store) -> AgentCatalog:
    """The agents as the server holds them: a plain mapping becomes a catalog, so versions are
    named as in production."""
    return agents if isinstance(agents, AgentCatalog) else AgentCatalog(agents, store)
