"""A question a downstream MCP server asks during a tool call, put to the user as our own question.

The server asks with form elicitation while the call (or its task's `tasks/result`) is open. The
question becomes a `question` interrupt that belongs to the tool call; the session shows
`waiting_for_input` and the user answers it like any question (answer_question, elicitation or
task input upstream, the CLI). The answer goes back to the server as the form's content, a
decline as a decline; when nobody answers within the server's `input_wait_s`, the server is told
`cancel` and the question is closed as expired. In a replay nobody is asked: each question is
resolved at once as the original resolved it, or declined (core/replays.py, ReplayAnswers).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from mcp.types import ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, InputResponses

from parley.core.ids import new_interrupt_id
from parley.core.records import InterruptRecord, Resolution, SessionRecord, ToolCallRecord
from parley.core.replays import REPLAY_RESOLVER, ReplayAnswers
from parley.runtime.downstream_links import link_payload, url_problem
from parley.runtime.mcp.connection import Asker
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.storage.ports import Store

logger = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 4000
MAX_CHOICES = 100


def question_payload(params: ElicitRequestFormParams, call: ToolCallRecord) -> dict[str, Any]:
    """What the user sees: the server's message, and the choices if the form has one field with
    fixed values. A form with several fields is answered with a JSON object of them."""
    schema = dict(params.requested_schema or {})
    fields = dict(schema.get("properties") or {})
    question = str(params.message)[:MAX_QUESTION_CHARS]
    choices: list[str] = []
    free_text = True
    if len(fields) == 1:
        field = next(iter(fields.values()))
        choices, labels = _choices(field)
        free_text = not choices
        if labels:
            question += "\n" + "\n".join(f"- {c}: {label}" for c, label in zip(choices, labels, strict=True))
    elif fields:
        question += "\nAnswer with a JSON object with the fields: " + ", ".join(
            f"{name} ({field.get('type', 'any')})" for name, field in fields.items()
        )
    return {
        "question": question,
        "choices": choices[:MAX_CHOICES],
        "allows_free_text": free_text,
        "downstream": {
            "server": call.server,
            "tool": call.tool or call.name,
            "form": schema,
            "mode": "in_place",
        },
        "tool": call.name,
    }


def _choices(field: dict[str, Any]) -> tuple[list[str], list[str]]:
    if isinstance(field.get("enum"), list):
        names = field.get("enumNames")
        labels = (
            [str(n) for n in names] if isinstance(names, list) and len(names) == len(field["enum"]) else []
        )
        return [str(v) for v in field["enum"]], labels
    for key in ("oneOf", "anyOf"):
        options = field.get(key)
        if (
            isinstance(options, list)
            and options
            and all(isinstance(o, dict) and "const" in o for o in options)
        ):
            return [str(o["const"]) for o in options], [str(o.get("title", o["const"])) for o in options]
    if field.get("type") == "boolean":
        return ["true", "false"], []
    return [], []


def elicit_result(interrupt: InterruptRecord) -> ElicitResult:
    """The server's answer, from how the user resolved the question."""
    resolution = interrupt.resolution or {}
    if interrupt.status == "declined" or resolution.get("declined"):
        return ElicitResult(action="decline")
    if (interrupt.payload.get("downstream") or {}).get("url") is not None:
        # A page to visit: accept says the owner opened it, nothing about what they did there.
        return ElicitResult(action="accept" if interrupt.status == "answered" else "cancel")
    answer = resolution.get("answer")
    if interrupt.status != "answered" or not isinstance(answer, str):
        return ElicitResult(action="cancel")
    form = (interrupt.payload.get("downstream") or {}).get("form") or {}
    fields = dict(form.get("properties") or {})
    if len(fields) == 1:
        ((name, field),) = fields.items()
        return ElicitResult(action="accept", content={name: _typed(answer, field)})
    try:
        content = json.loads(answer)
    except ValueError:
        content = None
    if isinstance(content, dict):
        return ElicitResult(action="accept", content=content)
    # Not what the form asks for: better to decline than to send something malformed.
    return ElicitResult(action="decline")


def _typed(answer: str, field: dict[str, Any]) -> Any:
    kind = field.get("type")
    try:
        if kind == "boolean":
            return answer.strip().lower() in ("true", "yes", "y", "1")
        if kind == "integer":
            return int(answer.strip())
        if kind == "number":
            return float(answer.strip())
        if kind == "array":
            value = json.loads(answer)
            return value if isinstance(value, list) else [answer]
    except ValueError:
        return answer
    return answer


def _question(
    call: ToolCallRecord, payload: dict[str, Any], now: float, wait_s: float, interrupt_id: str | None = None
) -> InterruptRecord:
    return InterruptRecord(
        id=interrupt_id or new_interrupt_id(),
        session_id=call.session_id,
        turn_id=call.turn_id,
        tool_call_id=call.id,
        kind="question",
        status="pending",
        payload=payload,
        created_at=now,
        deadline=now + wait_s,
    )


class DownstreamQuestions:
    def __init__(
        self,
        *,
        store: Store,
        signals: SessionSignals,
        clock: Callable[[], float],
        poll_interval_s: float,
        public_base: str | None = None,
    ) -> None:
        self._store = store
        self._public_base = public_base
        self._steps = SessionSteps(store)
        self._signals = signals
        self._clock = clock
        self._poll_interval_s = poll_interval_s

    def asker(
        self,
        session: SessionRecord,
        call: ToolCallRecord,
        wait_s: float,
        cancelled: Callable[[], bool],
        lease: str,
    ) -> Asker:
        """Asks the user in place; gives up (answering 'cancel') at `wait_s`, or at once when
        `cancelled()` says the turn is being cancelled or the process is stopping."""

        async def ask(params: ElicitRequestFormParams | ElicitRequestURLParams) -> ElicitResult:
            now = self._clock()
            interrupt = self._interrupt_for(params, call, now, wait_s)
            if interrupt is None:
                return ElicitResult(action="decline")
            await self._steps.raise_interrupt(session.id, lease, interrupt, now)
            self._signals.notify(session.id)
            if await self.settle_in_replay(session, call, [interrupt]):
                settled = await self._current(interrupt)
                return elicit_result(settled) if settled is not None else ElicitResult(action="decline")
            with anyio.move_on_after(wait_s), self._signals.watching(session.id) as changes:
                while not cancelled():
                    current = await self._current(interrupt)
                    if current is not None and current.status != "pending":
                        return elicit_result(current)
                    # The base interval at most: `cancelled()` is looked at only between waits.
                    await changes.wait(min(self._signals.poll_interval_s, self._poll_interval_s))
            if cancelled():
                # The turn ends (or the process stops): the question ends with the call.
                return ElicitResult(action="cancel")
            with anyio.CancelScope(shield=True):
                outcome = await self._steps.resolve_interrupt(
                    session.id, interrupt.id, Resolution(expired=True), "deadline", self._clock()
                )
                self._signals.notify(session.id)
            if outcome.outcome in ("already_resolved", "conflict") and outcome.interrupt is not None:
                return elicit_result(outcome.interrupt)  # answered at the last moment
            return ElicitResult(action="cancel")

        return ask

    def _interrupt_for(
        self,
        params: ElicitRequestFormParams | ElicitRequestURLParams,
        call: ToolCallRecord,
        now: float,
        wait_s: float,
    ) -> InterruptRecord | None:
        """The question to put to the person; None when a page to visit cannot be put to anybody."""
        if isinstance(params, ElicitRequestFormParams):
            return _question(call, question_payload(params, call), now, wait_s)
        if self._page_problem(params, call) is not None or self._public_base is None:
            return None
        interrupt_id = new_interrupt_id()
        payload = link_payload(params, call, interrupt_id, self._public_base)
        return _question(call, payload, now, wait_s, interrupt_id)

    def _page_problem(self, page: ElicitRequestURLParams, call: ToolCallRecord) -> str | None:
        """Why the page cannot be put to the session's owner (logged), or None."""
        problem = url_problem(page.url)
        if problem is None and self._public_base is None:
            problem = "http.public_url is not set, so parley has no link to give the session's owner"
        if problem is not None:
            logger.warning("MCP server %s asked for a page to be opened; declined: %s", call.server, problem)
        return problem

    async def settle_in_replay(
        self, session: SessionRecord, call: ToolCallRecord, questions: Sequence[InterruptRecord]
    ) -> bool:
        """In a replay, resolve the questions just raised at once, as the original resolved the
        same ones, or declined (False: not a replay, the questions wait for a person)."""
        if session.replay_of is None:
            return False
        store = self._store
        answers = ReplayAnswers.of(
            (await store.calls_of(session.replay_of), await store.list_interrupts(session.replay_of, False)),
            (await store.calls_of(session.id), await store.list_interrupts(session.id, False)),
        )
        for question in questions:
            resolution = answers.resolve(call, question)
            await self._steps.resolve_interrupt(
                session.id, question.id, resolution, REPLAY_RESOLVER, self._clock()
            )
        self._signals.notify(session.id)
        return True

    def retry_questions(
        self, session: SessionRecord, call: ToolCallRecord, forms: dict[str, Any], wait_s: float
    ) -> list[InterruptRecord]:
        """Questions for what a server asked in an input-required result; their answers go back
        with the retried call (an unanswered one as 'cancel' once `wait_s` has passed). A page
        that cannot be put to anybody is a question declined at once (`settle_refused`)."""
        now = self._clock()
        questions = []
        for key, form in forms.items():
            interrupt_id = new_interrupt_id()
            if form.get("mode") == "url":
                page = ElicitRequestURLParams.model_validate(form)
                problem = self._page_problem(page, call)
                payload = link_payload(page, call, interrupt_id, self._public_base or "")
                if problem is not None:
                    payload |= {"connect_url": None, "refused": problem}
            else:
                payload = question_payload(ElicitRequestFormParams.model_validate(form), call)
            payload["downstream"] |= {"mode": "retry", "key": key}
            questions.append(_question(call, payload, now, wait_s, interrupt_id))
        return questions

    async def settle_refused(self, session: SessionRecord, questions: Sequence[InterruptRecord]) -> None:
        """Decline the pages of an input-required round that nobody can be asked to open."""
        for question in questions:
            if question.payload.get("refused") is not None:
                await self._steps.resolve_interrupt(
                    session.id, question.id, Resolution(declined=True), "parley", self._clock()
                )
                self._signals.notify(session.id)

    async def answers(self, call: ToolCallRecord) -> InputResponses:
        """The answers to the call's latest round of questions, keyed as the server asked."""
        found: InputResponses = {}
        for interrupt in await self._store.list_interrupts(call.session_id, pending_only=False):
            downstream = interrupt.payload.get("downstream") or {}
            if interrupt.tool_call_id == call.id and downstream.get("mode") == "retry":
                # Later rounds reuse keys: the newest question of a key wins.
                found[str(downstream.get("key"))] = elicit_result(interrupt)
        keys = set((call.remote or {}).get("forms") or {})
        return {key: result for key, result in found.items() if key in keys}

    async def _current(self, interrupt: InterruptRecord) -> InterruptRecord | None:
        """The question as stored; while it is pending only the (short) pending list is read."""
        pending = await self._store.list_interrupts(interrupt.session_id, pending_only=True)
        if any(found.id == interrupt.id for found in pending):
            return interrupt
        for found in await self._store.list_interrupts(interrupt.session_id, pending_only=False):
            if found.id == interrupt.id:
                return found
        return None
