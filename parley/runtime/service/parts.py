"""What every role of the session service works with (one value, built once by the facade)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from parley.config import RuntimeConfig
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.audit import Audit
from parley.runtime.session_access import SessionAccess
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.storage.ports import Store


@dataclass(frozen=True, slots=True)
class Parts:
    """The store and its step port, the agents served, the wake-ups, the runtime settings, the
    clock, the audit trail and who may reach which session."""

    store: Store
    steps: SessionSteps
    agents: AgentCatalog
    signals: SessionSignals
    runtime: RuntimeConfig
    clock: Callable[[], float]
    audit: Audit
    access: SessionAccess
