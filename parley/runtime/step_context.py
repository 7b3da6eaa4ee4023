"""What every part of a turn's driving shares: the store and the step port, the signals, the
fault points, this process's id (the lease holder's name), timings and caps, the clock, and
whether the process is stopping; and the handle by which a turn in progress is cancelled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from opentelemetry.trace import Span

from parley.core.changes import SessionSnapshot, SnapshotScope
from parley.core.ids import TurnId
from parley.runtime.faults import FaultPoints
from parley.runtime.metrics import RuntimeMetrics
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.runtime.tracing import Tracing
from parley.storage.ports import Store


@dataclass(frozen=True, slots=True, kw_only=True)
class DriveSettings:
    lease_ttl_s: float
    poll_interval_s: float
    max_timer_s: float = 7 * 86_400
    max_model_attempts: int = 3
    model_retry_backoff_s: float = 1.0
    max_concurrent_model_calls: int = 16
    max_concurrent_tool_calls: int = 32
    max_driven_sessions: int = 64
    # parley's address for the links people open (http.public_base); None: no link can be made.
    public_base: str | None = None


@dataclass(slots=True, kw_only=True)
class StepContext:
    store: Store
    signals: SessionSignals
    process_id: str
    timings: DriveSettings
    clock: Callable[[], float]
    faults: FaultPoints = field(default_factory=FaultPoints)
    tracing: Tracing = field(default_factory=Tracing)
    metrics: RuntimeMetrics = field(default_factory=RuntimeMetrics)
    steps: SessionSteps = field(init=False)
    # Shutdown: finish the step in progress, start nothing new.
    stopping: bool = False

    def __post_init__(self) -> None:
        self.steps = SessionSteps(self.store)


class TurnControl:
    """One drive of a session: the lease token every write of it names, and the cancel scope of
    the step in progress, so the keeper can stop the current turn."""

    def __init__(self, lease: str) -> None:
        self.lease = lease
        self.turn_id: TurnId | None = None
        self.scope: anyio.CancelScope | None = None
        # Turns whose cancel was requested: work shielded from the scope (a tool call waiting on
        # its server's question) looks here to give up its wait.
        self.cancelled: set[TurnId] = set()
        # The `invoke_agent` span of the turn this drive works on (runtime/tracing.py), if any.
        self.span_turn: TurnId | None = None
        self.span: Span | None = None
        # The turn this drive started (any other was resumed: started earlier, maybe elsewhere).
        self.started_turn: TurnId | None = None
        # When the turn worked on started (for its duration when it ends).
        self.turn_started_at: float | None = None
        # A turn's end is being written that may let go of the lease (the keeper must not take a
        # lease no longer held for a lost one), and the status the session rested in when it did.
        self.letting_go = False
        self.rested: str | None = None
        # The turn a model step ended in its own transaction (its answer and its end as one write).
        self.ended_by_step: TurnId | None = None
        # The session as the last step's transaction read it back, for the wake-up that follows.
        self.seen: SessionSnapshot | None = None
        # What a step's last commit reads back for the next step (the whole session with the
        # transcript's messages the driver's copy lacks), and what it read; None: not read.
        self.step_view: SnapshotScope | None = None
        self.looked: SessionSnapshot | None = None

    def take_seen(self) -> SessionSnapshot | None:
        seen, self.seen = self.seen, None
        return seen

    def cancel(self, turn_id: TurnId) -> None:
        self.cancelled.add(turn_id)
        if self.turn_id == turn_id and self.scope is not None:
            self.scope.cancel()
