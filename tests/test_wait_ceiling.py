"""A caller's wait is capped by the server, so no call outlives what clients allow."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from parley.config import DEMO_AGENT, RuntimeConfig
from parley.runtime.access import LOCAL_PRINCIPAL
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.service import ServiceOptions, SessionService, StartRequest, Waiting
from parley.runtime.signals import SessionSignals
from parley.runtime.toolbox import Toolbox
from parley.storage.sqlite import open_sqlite_store
from tests.support import TEST_DEADLINE_S

pytestmark = pytest.mark.anyio


async def test_a_wait_longer_than_the_ceiling_returns_running_at_the_ceiling(tmp_path: Path) -> None:
    runtime = RuntimeConfig(max_wait_s=0.3, default_wait_s=0.2, poll_interval_s=0.05)
    async with open_sqlite_store(tmp_path / "w.db") as store:
        # No scheduler runs here, so the message is never taken: only the ceiling ends the wait.
        service = SessionService.build(
            store=store,
            agents=AgentCatalog({"demo": DEMO_AGENT}, store),
            signals=SessionSignals(),
            clock=time.time,
            toolbox=Toolbox(None),
            options=ServiceOptions(runtime=runtime),
        )
        started = anyio.current_time()
        with anyio.fail_after(TEST_DEADLINE_S):
            outcome = await service.messages.start_session(
                LOCAL_PRINCIPAL, StartRequest(agent="demo", message="hello"), Waiting(seconds=3600)
            )
        assert outcome.status == "running"
        assert anyio.current_time() - started < 3, "capped at max_wait_s, not the hour asked for"
        started = anyio.current_time()
        with anyio.fail_after(TEST_DEADLINE_S):
            outcome = await service.messages.start_session(
                LOCAL_PRINCIPAL, StartRequest(agent="demo", message="hello again"), Waiting(seconds=None)
            )
        assert outcome.status == "running" and anyio.current_time() - started < 3
