"""The operations callers perform on sessions, independent of MCP, by role:

- commands: `messages` (start_session, send_message, delete_queued_message; messages.py),
  `decisions` (approve, answer_question, the retry of an input-required round; decide.py),
  `lifecycle` (cancel_turn, close_session, update_session, delete_session; lifecycle.py),
  `forks` (fork_session; forks.py), `replays` (replays.py) and `evals` (an eval's scripted
  sessions; evals.py), `schedules` (a schedule's tick started as a session, and the admins'
  commands on schedules; schedules.py);
- `waits`: the one bounded wait and the waits built on it (waits.py);
- `reads`: what a caller is shown (reads.py), of outcomes.py's TurnOutcome and SessionDetails;
- `persons`: answers given by the person behind a caller's client (persons.py);
- boundary checks: the arguments (checks.py) and who may reach a session (`access`,
  session_access.py), both before a command stores anything.

Every mutating command commits first and then waits, bounded, for the turn that consumes the
caller's message. The wait is only the caller's: cancelling it (a client timeout, a dropped
connection) never touches the turn. What a command carries comes in small requests
(requests.py). See docs/design.md#the-session-service."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from parley.config import RuntimeConfig
from parley.config.attachments import AttachmentsConfig
from parley.config.auth import LimitsConfig
from parley.core.schedules import Schedule
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.audit import Audit
from parley.runtime.decisions import Decisions
from parley.runtime.fair_use import FairUse
from parley.runtime.faults import FaultPoints
from parley.runtime.model_titles import ModelTitles
from parley.runtime.service.accounts import AccountCommands, ConnectedAccount
from parley.runtime.service.checks import Checks, cursor_time, render_first_message
from parley.runtime.service.decide import DecisionCommands
from parley.runtime.service.evals import EvalCommands
from parley.runtime.service.forks import ForkCommands, ForkRequest
from parley.runtime.service.lifecycle import LifecycleCommands
from parley.runtime.service.messages import MessageCommands
from parley.runtime.service.outcomes import SessionDetails, TurnOutcome
from parley.runtime.service.parts import Parts
from parley.runtime.service.persons import PersonAnswers
from parley.runtime.service.plans import PlanCommands
from parley.runtime.service.reads import Reads
from parley.runtime.service.replays import ReplayCommands
from parley.runtime.service.requests import (
    MessagesPage,
    QuestionAnswer,
    SendRequest,
    SessionQuery,
    StartRequest,
    Waiting,
)
from parley.runtime.service.schedules import ScheduleCommands
from parley.runtime.service.waits import Waits
from parley.runtime.session_access import SessionAccess
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.runtime.toolbox import Toolbox
from parley.storage.ports import Store

__all__ = [
    "ConnectedAccount",
    "ForkRequest",
    "MessagesPage",
    "QuestionAnswer",
    "SendRequest",
    "ServiceOptions",
    "SessionDetails",
    "SessionQuery",
    "SessionService",
    "StartRequest",
    "TurnOutcome",
    "Waiting",
    "cursor_time",
    "render_first_message",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceOptions:
    """How the service is configured: the runtime settings, the models a session may choose,
    fair use limits, attachment limits, and the titler of sessions by a model (if any)."""

    runtime: RuntimeConfig
    model_names: Sequence[str] = ()
    limits: LimitsConfig | None = None
    attachments: AttachmentsConfig | None = None
    titles: ModelTitles | None = None
    # Crash tests' fault points (inert unless armed).
    faults: FaultPoints = field(default_factory=FaultPoints)
    # parley.yaml's schedules (read-only for the schedule tools).
    schedules: Sequence[Schedule] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionService:
    """The session service's roles, wired once (`build`); a caller takes the ones it needs."""

    messages: MessageCommands
    decisions: DecisionCommands
    lifecycle: LifecycleCommands
    plans: PlanCommands
    replays: ReplayCommands
    evals: EvalCommands
    forks: ForkCommands
    schedules: ScheduleCommands
    accounts: AccountCommands
    waits: Waits
    reads: Reads
    persons: PersonAnswers
    access: SessionAccess
    audit: Audit

    @classmethod
    def build(
        cls,
        *,
        store: Store,
        agents: AgentCatalog,
        signals: SessionSignals,
        clock: Callable[[], float],
        toolbox: Toolbox,
        options: ServiceOptions,
    ) -> SessionService:
        audit = Audit(store, clock)
        access = SessionAccess(store, agents, audit)
        parts = Parts(store, SessionSteps(store), agents, signals, options.runtime, clock, audit, access)
        checks = Checks(
            agents, options.runtime, toolbox, options.model_names, options.attachments or AttachmentsConfig()
        )
        persons = PersonAnswers(parts)
        waits = Waits(parts, persons)
        fair_use = FairUse(options.limits or LimitsConfig())
        return cls(
            messages=MessageCommands(parts, checks, waits, fair_use, options.titles),
            decisions=DecisionCommands(parts, checks, waits, Decisions(store, agents, clock), persons),
            lifecycle=LifecycleCommands(parts, checks, waits),
            plans=PlanCommands(parts, checks, waits, fair_use, options.faults),
            replays=ReplayCommands(parts, fair_use),
            evals=EvalCommands(parts, checks, fair_use),
            forks=ForkCommands(parts, checks, fair_use),
            schedules=ScheduleCommands(parts, checks, fair_use, options.schedules),
            accounts=AccountCommands(store, audit, clock),
            waits=waits,
            reads=Reads(parts, checks, waits, toolbox, options.model_names),
            persons=persons,
            access=access,
            audit=audit,
        )
