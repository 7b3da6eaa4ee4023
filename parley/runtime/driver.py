"""The session driver: runs one leased session's turns step by step, committing each step.

The driver holds the session's lease for as long as it works. A keeper task renews the
lease and watches the stored cancel request, so a `cancel_turn` written by any process
stops the turn here. Shutdown is different from cancelling: it leaves the turn as
committed so the next process to take the lease resumes it. The loop, step by step:
docs/design.md#the-driver; what a crash leaves and the next holder does:
docs/design.md#crashes-and-lost-calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import anyio
from anyio.abc import TaskGroup
from opentelemetry import trace

from parley.config import AgentLimits, ModelSpec, effective_limits
from parley.core import transitions
from parley.core.changes import SessionSnapshot, SnapshotScope
from parley.core.ids import SessionId, TurnId, new_turn_id
from parley.core.machine import CallModel, FinishTurn, Nudge, RunTools, next_action
from parley.core.records import SessionRecord, TurnRecord
from parley.core.states import DRIVEN_SESSION, ENDED_SESSION
from parley.errors import LeaseLost
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.claim_start import STEP_VIEW, StartedTurn, StartOnClaim, is_fresh, is_parked, start_look
from parley.runtime.faults import FaultPoints
from parley.runtime.leased_transcript import LeasedTranscript, TranscriptCache
from parley.runtime.metrics import RuntimeMetrics
from parley.runtime.model_caller import ModelCaller, ModelFor
from parley.runtime.session_log import about
from parley.runtime.signals import SessionSignals, Watch
from parley.runtime.step_context import DriveSettings, StepContext, TurnControl
from parley.runtime.tool_runner import ToolRunner
from parley.runtime.toolbox import Toolbox
from parley.runtime.tracing import Tracing
from parley.storage.ports import Store

__all__ = ["DriveSettings", "SessionDriver"]

logger = logging.getLogger(__name__)

STEERED = (
    "Steered: a new message arrived, so the turn stopped after the step in progress; calls that "
    "had not run and waits of the turn were cancelled."
)
# Cleanup after a cancel must reach the database even though the task is being cancelled.
PERSIST_GRACE_S = 10.0


def _session_limit(limits: AgentLimits, session: SessionRecord, now: float) -> str | None:
    used = session.input_tokens + session.output_tokens
    if limits.max_session_tokens is not None and used >= limits.max_session_tokens:
        return f"the session used {used} model tokens, its limit is {limits.max_session_tokens}"
    if limits.max_session_seconds is not None and now - session.created_at >= limits.max_session_seconds:
        return f"the session reached its wall-time limit of {limits.max_session_seconds:g}s"
    return None


def _looked(control: TurnControl, transcript: LeasedTranscript) -> SessionSnapshot | None:
    """The session as the step's last commit read it back for the next step (None: the next
    step reads it); the transcript's copy takes the messages read with it."""
    looked, view = control.looked, control.step_view
    control.looked = control.step_view = None
    if looked is None or view is None:
        return None
    if view.messages_from is not None:
        transcript.caught_up(looked)
    return looked


class SessionDriver:
    """Drives sessions whose lease this process holds: one turn's steps after another, until the
    session rests. One instance per process; the model step and the tool step are their own parts
    (model_caller.py, tool_runner.py), the rules of what each step does to the session live in
    transitions.py."""

    def __init__(
        self,
        *,
        store: Store,
        agents: AgentCatalog,
        models: ModelFor,
        toolbox: Toolbox,
        signals: SessionSignals,
        faults: FaultPoints | None = None,
        catalog: Mapping[str, ModelSpec] | None = None,
        process_id: str,
        timings: DriveSettings,
        clock: Callable[[], float],
        tracing: Tracing | None = None,
        metrics: RuntimeMetrics | None = None,
    ) -> None:
        self._ctx = StepContext(
            store=store,
            signals=signals,
            process_id=process_id,
            timings=timings,
            clock=clock,
            faults=faults or FaultPoints(),
            tracing=tracing or Tracing(),
            metrics=metrics or RuntimeMetrics(),
        )
        self._agents = agents
        self._toolbox = toolbox
        self._models = ModelCaller(self._ctx, models=models, catalog=catalog or {}, toolbox=toolbox)
        self._tools = ToolRunner(self._ctx, toolbox)
        self._transcripts = TranscriptCache(store)

    def stop_after_current_step(self) -> None:
        """Shutdown: finish the step in progress, then release the session without starting another."""
        self._ctx.stopping = True

    def start_on_claim(self, session_id: SessionId, now: float) -> StartOnClaim:
        """The decision a claim of the session's lease makes in its transaction: the turn this
        driver would start first (claim_start.py). Hand what it started to `drive`."""
        return StartOnClaim(
            self._agents,
            new_turn_id(),
            now,
            self._transcripts.next_seq(session_id),
            lambda: self._ctx.stopping,
        )

    async def drive(
        self,
        session_id: SessionId,
        lease: str,
        first: SessionSnapshot | None = None,
        started: StartedTurn | None = None,
    ) -> bool:
        """Work the session until it rests, under the lease token the caller acquired (`first`:
        the snapshot the claim read, if it did; `started`: the turn its decision started). True
        when, as the lease is let go, the session needs a driver again (a message came meanwhile)."""
        control = TurnControl(lease)
        again = False
        self._ctx.metrics.leases_held.inc()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._keep_lease, session_id, control, tg)
                await self._work(session_id, control, first, started)
                tg.cancel_scope.cancel()
        except* LeaseLost:
            # Another process took over (this one stalled past the lease); nothing was committed here.
            logger.warning("lost the lease of session %s; another process drives it now", session_id)
        finally:
            # The turn goes on later (a person, a timer, another process): this drive's span ends.
            self._end_turn_span(control, "released" if self._ctx.stopping else "parked")
            self._ctx.metrics.leases_held.dec()
            if control.rested is not None:
                # The turn's end let go of the lease at rest: nothing to release or read again (a
                # message that came since was told to the scheduler, which claims it at once).
                self._forget_if_ended(session_id, control.rested)
            else:
                with anyio.move_on_after(PERSIST_GRACE_S, shield=True):
                    await self._ctx.store.release_lease(session_id, lease)
                    ended = await self._ctx.store.get_session(session_id)
                    if ended is not None:
                        self._forget_if_ended(session_id, ended.status)
                    again = (
                        ended is not None
                        and not self._ctx.stopping
                        and ended.status in DRIVEN_SESSION
                        and not is_parked(ended, self._ctx.clock())
                    )
            self._ctx.signals.notify(session_id)
        return again

    def _forget_if_ended(self, session_id: SessionId, status: str) -> None:
        if status in ENDED_SESSION:
            self._toolbox.release_session(session_id)  # its per-session MCP connections
            self._transcripts.forget(session_id)

    async def _keep_lease(self, session_id: SessionId, control: TurnControl, tg: TaskGroup) -> None:
        """Look for cancel requests when one is signalled (in this process, or by another through
        the change feed) and otherwise every poll interval (a read), and renew the lease (a write,
        with an fsync) only every third of its time to live: renewing hundreds of leases every
        poll interval would queue the very writes that keep them alive."""
        with self._ctx.signals.watching_cancel(session_id) as cancels:
            await self._keep(session_id, control, tg, cancels)

    async def _keep(self, session_id: SessionId, control: TurnControl, tg: TaskGroup, cancels: Watch) -> None:
        ttl = self._ctx.timings.lease_ttl_s
        renew_every = ttl / 3
        renewed_at = anyio.current_time()
        while True:
            # The interval is read each time: it grows while the change feed is live.
            await cancels.wait(min(self._ctx.signals.poll_interval_s, renew_every))
            if anyio.current_time() - renewed_at >= renew_every:
                try:
                    session = await self._ctx.store.renew_lease(
                        session_id, control.lease, self._ctx.clock(), ttl
                    )
                except LeaseLost:
                    if control.letting_go:
                        return  # the turn's end let go of it: not lost
                    tg.cancel_scope.cancel()
                    raise
                renewed_at = anyio.current_time()
            else:
                found = await self._ctx.store.get_session(session_id)
                if found is None or found.lease_owner != control.lease:
                    if control.letting_go:
                        return  # the turn's end let go of it: not lost
                    tg.cancel_scope.cancel()
                    raise LeaseLost(session_id)
                session = found
            if session.cancel_requested_turn is not None:
                control.cancel(session.cancel_requested_turn)

    async def _work(
        self,
        session_id: SessionId,
        control: TurnControl,
        claimed: SessionSnapshot | None,
        claim_started: StartedTurn | None,
    ) -> None:
        first = True
        transcript = self._transcripts.leased(session_id, control.lease)
        if claim_started is not None and claimed is not None:
            self._began(claimed.session, claim_started, claimed, transcript, control)
            # Its sender here learns of the turn from the claim's own read (Watch's `seen`).
            self._ctx.signals.notify(session_id, seen=claimed)
        # What the claim or a turn's start read back in its own transaction: the next step's snapshot.
        started = claimed
        while control.rested is None:  # a turn's end that rested the session let go of the lease
            # One read per step: the session, its current turn with its calls, and its queue.
            snapshot = started or await self._ctx.steps.look(session_id, STEP_VIEW)
            started = None
            if snapshot is None:
                return
            session = snapshot.session
            # A question a server asked during a call that was open in a process that stopped
            # can never reach that call: drop it, so the session does not wait for it.
            if (
                first
                and session.status == "waiting_for_input"
                and await self._ctx.steps.drop_questions_in_place(
                    session_id, control.lease, self._ctx.clock()
                )
            ):
                continue
            first = False
            if self._ctx.stopping:
                # Shutdown: start nothing new, but a turn whose last step is committed is ended
                # now, so its caller sees the answer without waiting for the next process.
                if session.current_turn_id is not None:
                    await self._traced_step(snapshot, transcript, control, only_finish=True)
                    self._ctx.signals.notify(session_id)
                return
            if is_parked(session, self._ctx.clock()):
                return  # waiting for input or a timer; the scheduler brings it back
            if session.current_turn_id is None:
                if session.status != "running":
                    return
                began, started = await self._start_turn(session, transcript, control)
                if not began and await self._ctx.steps.rest_session(
                    session_id, control.lease, self._ctx.clock()
                ):
                    self._ctx.signals.notify(session_id)
                    return
                # Its sender here learns of the turn from the start's own read (Watch's `seen`).
                self._ctx.signals.notify(session_id, seen=started)
                continue
            if any(q.steer for q in snapshot.queued):
                # Steered: end the turn at this step boundary; the next turn takes the steered messages.
                await self._finish(
                    control, session, session.current_turn_id, FinishTurn("cancelled", None, STEERED)
                )
                self._ctx.signals.notify(session_id)
                continue
            await self._traced_step(snapshot, transcript, control)
            started = _looked(control, transcript)
            self._ctx.signals.notify(session_id, seen=control.take_seen())

    async def _start_turn(
        self, session: SessionRecord, transcript: LeasedTranscript, control: TurnControl
    ) -> tuple[bool, SessionSnapshot | None]:
        """Start a turn on the agent's definition of now (or the version the session is pinned to),
        which it runs on to its end whatever changes. Whether a turn started, and the first
        step's snapshot with the transcript's new messages (the one the turn takes, at least),
        as the start's own transaction read them back."""
        now = self._ctx.clock()
        version, store_version = await self._agents.for_new_turn_of(
            session.agent, now, session.agent_version_pin
        )
        look = start_look(session, transcript.next_seq)
        turn, started = await self._ctx.steps.start_turn_and_look(
            session.id, control.lease, new_turn_id(), now, version, store_version=store_version, look=look
        )
        if turn is None:
            return False, None
        begun = StartedTurn(turn, version, store_version, is_fresh(session), look.messages_from)
        self._began(session, begun, started, transcript, control)
        return True, started

    def _began(
        self,
        session: SessionRecord,
        begun: StartedTurn,
        started: SessionSnapshot | None,
        transcript: LeasedTranscript,
        control: TurnControl,
    ) -> None:
        """What follows a turn's committed start: the transcript's copy takes the messages the
        start read back (if the copy is the one they follow), and the turn is logged."""
        if (
            started is not None
            and begun.messages_from is not None
            and (transcript.next_seq or 0) == begun.messages_from
        ):
            transcript.caught_up(started, whole=begun.fresh)
        control.started_turn = begun.turn.id
        if begun.version is not None and begun.stored:
            self._agents.mark_stored(begun.version)
        logger.info(
            "session %s: turn %s started on agent %s version %s",
            session.id,
            begun.turn.id,
            session.agent,
            begun.turn.agent_version,
            extra={**about(session), "turn_id": begun.turn.id},
        )

    async def _traced_step(
        self,
        snapshot: SessionSnapshot,
        transcript: LeasedTranscript,
        control: TurnControl,
        *,
        only_finish: bool = False,
    ) -> None:
        """A step under the turn's `invoke_agent` span (opened on the drive's first step of the
        turn), so its model and tool spans are the turn's children; no span work when off."""
        if snapshot.turn is not None:
            control.turn_started_at = snapshot.turn.started_at
        with self._ctx.metrics.running_turns.track_inprogress():
            if not self._ctx.tracing.enabled or snapshot.turn is None:
                await self._step(snapshot, transcript, control, only_finish=only_finish)
                return
            await self._enter_turn_span(snapshot.session, snapshot.turn, control)
            assert control.span is not None
            with trace.use_span(control.span, end_on_exit=False):
                await self._step(snapshot, transcript, control, only_finish=only_finish)

    async def _enter_turn_span(self, session: SessionRecord, turn: TurnRecord, control: TurnControl) -> None:
        if control.span_turn == turn.id:
            return
        self._end_turn_span(control, "parked")
        caller = None
        if turn.queued_message_id is not None:
            queued = await self._ctx.store.get_queued(turn.queued_message_id)
            caller = queued.trace_context if queued is not None else None
        control.span_turn = turn.id
        control.span = self._ctx.tracing.start_turn(
            session_id=session.id,
            agent=session.agent,
            turn_id=turn.id,
            agent_version=turn.agent_version,
            caller_context=caller,
            resumed=control.started_turn != turn.id,
        )

    def _end_turn_span(self, control: TurnControl, outcome: str, error: str | None = None) -> None:
        if control.span is not None:
            self._ctx.tracing.end_turn(control.span, outcome, error)
            control.span, control.span_turn = None, None

    async def _step(
        self,
        snapshot: SessionSnapshot,
        transcript: LeasedTranscript,
        control: TurnControl,
        *,
        only_finish: bool = False,
    ) -> None:
        session, turn = snapshot.session, snapshot.turn
        turn_id = session.current_turn_id
        if turn is None or turn_id is None:
            return
        agent = await self._agents.for_turn(session.agent, turn.agent_version)
        if agent is None:
            why = (
                f"agent '{session.agent}' is no longer configured"
                if turn.agent_version is None or session.agent not in self._agents
                else f"the definition of agent '{session.agent}' this turn started on (version "
                f"{turn.agent_version}) is not in the database"
            )
            await self._finish(control, session, turn_id, FinishTurn("failed", None, why))
            return
        if session.cancel_requested_turn == turn_id:
            await self._finish(control, session, turn_id, FinishTurn("cancelled", None, None))
            return
        messages = await transcript.current(snapshot)
        # A model step that calls tools, or the tools' end, reads the session back for the next
        # step in its own transaction, with the messages written since the copy's last one.
        control.step_view = SnapshotScope(messages_from=transcript.next_seq)
        turn_messages = [m for m in messages if m.turn_id == turn_id]
        limits = effective_limits(agent.limits, turn.settings)
        action = next_action(
            turn,
            list(snapshot.calls),
            turn_messages,
            limits.max_model_calls_per_turn,
            kind=session.kind,
            max_nudges=limits.max_result_nudges,
        )

        if isinstance(action, FinishTurn):
            await self._ctx.faults.hit("turn_finishing", action.answer or "")
            await self._finish(control, session, turn_id, action)
            return
        if only_finish:
            return
        if isinstance(action, Nudge):
            await self._ctx.steps.append_nudge(
                session.id, control.lease, turn_id, action.text, self._ctx.clock()
            )
            return
        if isinstance(action, CallModel):
            exceeded = _session_limit(limits, session, self._ctx.clock())
            if exceeded is not None:
                await self._finish(
                    control, session, turn_id, FinishTurn("failed", None, exceeded), limit_reason=exceeded
                )
                return
        with anyio.CancelScope() as scope:
            control.turn_id, control.scope = turn_id, scope
            try:
                if isinstance(action, CallModel):
                    failure = await self._models.call(
                        session, agent, turn, action, transcript, control, self._ending(session)
                    )
                    if failure is not None:
                        await self._finish(control, session, turn_id, failure)
                elif isinstance(action, RunTools):
                    await self._tools.run(session, agent, action.calls, control)
            finally:
                control.turn_id, control.scope = None, None
        if control.ended_by_step == turn_id:
            # The model's answer ended the turn in the step's own write.
            self._finished(control, session, turn_id, FinishTurn("answered", None, None))
        elif scope.cancelled_caught:
            await self._finish(control, session, turn_id, FinishTurn("cancelled", None, None))

    def _ending(self, session: SessionRecord) -> Callable[[FinishTurn], transitions.TurnEnd] | None:
        """What ending a chat turn with an answer does to its session, for a model step that may
        end the turn itself (a task session's answer is reminded of its result instead)."""
        if session.kind == "task":
            return None
        agent = self._agents.get(session.agent)
        max_turns = effective_limits(agent.limits, session.settings).max_turns if agent else None
        return lambda action: transitions.turn_end(session, action, limit_reason=None, max_turns=max_turns)

    async def _finish(
        self,
        control: TurnControl,
        session: SessionRecord,
        turn_id: TurnId,
        action: FinishTurn,
        limit_reason: str | None = None,
    ) -> None:
        # What the step read back is older than this end: neither the next step nor a waiter takes it.
        control.looked = control.seen = None
        agent = self._agents.get(session.agent)
        if action.status in ("cancelled", "failed"):
            await self._tools.cancel_remote_tasks(session, turn_id)
        max_turns = effective_limits(agent.limits, session.settings).max_turns if agent else None
        end = transitions.turn_end(session, action, limit_reason=limit_reason, max_turns=max_turns)
        with anyio.CancelScope(shield=True):
            control.letting_go = True
            try:
                control.rested = await self._ctx.steps.finish_turn(
                    session.id, control.lease, turn_id, end, self._ctx.clock()
                )
            finally:
                control.letting_go = control.rested is not None
        self._finished(control, session, turn_id, action)

    def _finished(
        self, control: TurnControl, session: SessionRecord, turn_id: TurnId, action: FinishTurn
    ) -> None:
        """What follows a turn's end committed: its span, its metrics, its log line."""
        if control.span_turn == turn_id:
            self._end_turn_span(control, action.status, action.error)
        self._ctx.metrics.turns.labels(session.agent, action.status).inc()
        if control.turn_started_at is not None:
            elapsed = max(0.0, self._ctx.clock() - control.turn_started_at)
            self._ctx.metrics.turn_seconds.labels(session.agent).observe(elapsed)
        ended = f"session %s: turn %s {action.status}" + (": %s" if action.error else "")
        args = (session.id, turn_id, action.error) if action.error else (session.id, turn_id)
        level = logging.WARNING if action.status == "failed" else logging.INFO
        logger.log(level, ended, *args, extra={**about(session), "turn_id": turn_id})
