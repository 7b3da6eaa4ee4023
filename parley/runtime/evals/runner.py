"""Running an eval's cases as ordinary sessions of the caller's (tagged `eval`): each case on
each agent version named, at most `concurrency` at once, then its session read back and its
assertions checked. Every session is started with a client_message_id drawn from the dataset,
the case and the version, so a rerun of the same eval after a crash finds the sessions it
started and waits for them, instead of starting them again."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import anyio

from parley.core.ids import SessionId
from parley.core.records import SessionRecord
from parley.errors import RequestError
from parley.runtime.access import Principal
from parley.runtime.evals.checks import Call, Observed, Verdict, failures
from parley.runtime.evals.dataset import Case, Dataset, Judge
from parley.runtime.service import SessionService
from parley.runtime.service.evals import ScriptedStart
from parley.storage.ports import Store

# How often a run looks at the sessions it waits for (their turns run in this process).
_POLL_S = 0.05
# A session at rest: nothing runs, nothing more will unless someone acts.
_AT_REST = ("idle", "completed", "failed", "closed", "waiting_for_input")

# What asks a judge for its verdict on a case (the CLI binds it to the models of parley.yaml).
JudgeFn = Callable[[Judge, list[str], str | None], Awaitable[Verdict]]


@dataclass(frozen=True, slots=True)
class Target:
    """An agent version the cases run on: the agent, its stored version, and the name the
    command was given (NAME for the live definition, NAME@VERSION for a stored one)."""

    agent: str
    version: str
    label: str


@dataclass(frozen=True, slots=True)
class CaseRun:
    """One case on one target: what its session showed and the assertions it failed, or why it
    could not run."""

    case: str
    target: Target
    observed: Observed | None
    failed: list[str]

    @property
    def passed(self) -> bool:
        return self.observed is not None and not self.failed


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRunner:
    service: SessionService
    store: Store
    caller: Principal
    judge: JudgeFn
    dataset_text: str
    wait_s: float = 600.0

    async def target(self, spec: str) -> Target:
        """NAME (the live definition, stored as a version) or NAME@VERSION (a stored version)."""
        name, _, version = spec.partition("@")
        pin, _ = await self.service.evals.pin(self.caller, name, version or None)
        return Target(agent=name, version=pin, label=f"{name}@{pin}" if version else name)

    async def run_all(self, dataset: Dataset, targets: list[Target], concurrency: int) -> list[CaseRun]:
        """Every case on every target, in the dataset's order (for each case, the targets')."""
        limiter = anyio.CapacityLimiter(concurrency)
        jobs = [(case, target) for case in dataset.cases for target in targets]
        runs: list[CaseRun | None] = [None] * len(jobs)

        async def one(index: int, case: Case, target: Target) -> None:
            async with limiter:
                runs[index] = await self.run_case(case, target)

        async with anyio.create_task_group() as tg:
            for index, (case, target) in enumerate(jobs):
                tg.start_soon(one, index, case, target)
        return [run for run in runs if run is not None]

    async def run_case(self, case: Case, target: Target) -> CaseRun:
        try:
            session = await self._start(case, target)
            session = await self._at_rest(session.id)
        except RequestError as exc:
            return CaseRun(case.name, target, None, [f"did not run: {exc}"])
        observed, sent = await self._observe(session, target)
        if case.expect.judge is not None:
            verdict = await self.judge(case.expect.judge, sent, observed.final_text)
            observed = replace(observed, verdict=verdict)
        return CaseRun(case.name, target, observed, failures(case.expect, observed))

    def key(self, case: Case, target: Target) -> str:
        """The client_message_id of the case's session on `target`: the same for the same dataset
        (its text), case and version, so a rerun finds the session."""
        dataset = hashlib.sha256(self.dataset_text.encode()).hexdigest()
        seed = "\0".join((dataset, case.name, target.agent, target.version))
        return "eval:" + hashlib.sha256(seed.encode()).hexdigest()[:48]

    async def _start(self, case: Case, target: Target) -> SessionRecord:
        key = self.key(case, target)
        if case.replay is not None:
            return await self.service.replays.replay(
                self.caller, case.replay, target.agent, version=target.version, client_message_id=key
            )
        assert case.messages is not None
        start = ScriptedStart(
            agent=target.agent,
            version=target.version,
            messages=list(case.messages),
            client_message_id=key,
            kind=case.kind,
            inputs=case.inputs,
            title=f"Eval: {case.name}",
        )
        return await self.service.evals.start_scripted(self.caller, start)

    async def _at_rest(self, session_id: SessionId) -> SessionRecord:
        deadline = time.monotonic() + self.wait_s
        while True:
            session = await self.store.get_session(session_id)
            if session is None:
                raise RequestError(f"session {session_id} is gone (deleted while the eval ran)")
            if session.status in _AT_REST and not (
                session.status == "idle" and await self.store.list_queued(session_id)
            ):
                return session
            if time.monotonic() > deadline:
                raise RequestError(
                    f"session {session_id} did not finish within {self.wait_s:g} s; it goes on in the "
                    "database: run the same command again to wait for it"
                )
            await anyio.sleep(_POLL_S)

    async def _observe(self, session: SessionRecord, target: Target) -> tuple[Observed, list[str]]:
        """What the session showed, and the messages it was sent."""
        turns = await self.store.list_turns(session.id)
        calls = await self.store.calls_of(session.id)
        sent = [m.text for m in await self.store.consumed_messages(session.id)]
        observed = Observed(
            session_id=session.id,
            version=target.version,
            turns=len(turns),
            turn_statuses=[t.status for t in turns],
            errors=[t.error or "" for t in turns],
            tokens=sum(t.input_tokens + t.output_tokens for t in turns),
            latency_s=round(sum((t.ended_at or t.started_at) - t.started_at for t in turns), 3),
            calls=[Call(c.name, c.arguments, c.status, offered=c.source != "unknown") for c in calls],
            final_text=turns[-1].answer if turns else None,
            result=session.result,
            waiting=session.status == "waiting_for_input",
        )
        return observed, sent
