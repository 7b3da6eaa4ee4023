"""The client's tool calls: one call and its typed result, and a turn followed to where it rests.

A turn call (start_session, send_message, approve, answer_question, cancel_turn) is followed
until nothing more happens by itself:
- `running` (the turn outlasted the server's wait): a send is repeated with its client_message_id,
  which waits for the same turn again and never sends twice; after a decision or a cancel,
  get_session waits for the session to rest;
- `waiting_for_input`: each approval or question not offered yet goes to the caller's callbacks,
  and what they decide goes back through approve / answer_question (whose outcome is followed in
  turn); what they leave undecided comes back as `waiting_for_input`;
- a task handle (with tasks on): tasks/get is polled until the task completes, or needs input,
  which is handled as above;
- an input-required round (as the person, see forms.py): the callbacks answer its forms, and the
  same call is sent again with the answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import CallToolResult, ElicitResult, InputRequiredResult, TextContent
from pydantic import BaseModel

from parley.client import forms, tasks
from parley.client.connection import Connection
from parley.client.errors import ClientError, ProtocolError, tool_error
from parley.client.events import Event, from_progress
from parley.client.handlers import Decline, Handlers, OnEvent, Reject, resolved
from parley.client.models import Outcome, PendingItem, PendingList, SessionState
from parley.client.tasks import TaskHandle

M = TypeVar("M", bound=BaseModel)

# How much longer than the server's wait a turn call may take to come back before the client
# counts the connection as broken (and sends the call again on a new one).
CALL_MARGIN_S = 30.0
# How long a call that does not wait for a turn may take.
READ_TIMEOUT_S = 60.0
# Events held for an events() reader that falls behind; events beyond that are dropped for it.
EVENT_BUFFER = 1000
# Input-required rounds of one call before the client gives up (each asks only new interrupts).
MAX_INPUT_ROUNDS = 10
# The turn calls whose repetition (with the same client_message_id) waits for the same turn again.
_REPEATABLE = frozenset({"start_session", "send_message"})


def _queued_behind_input(outcome: Outcome) -> bool:
    return outcome.status == "running" and outcome.session_status == "waiting_for_input"


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


class Calls:
    """Every tool call of one client goes through here."""

    def __init__(
        self, connection: Connection, *, wait_s: float, handlers: Handlers, as_person: bool = False
    ) -> None:
        self.connection = connection
        self.wait_s = wait_s
        self.handlers = handlers
        self.as_person = as_person
        self._subscribers: dict[str, set[MemoryObjectSendStream[Event]]] = {}

    # ------------------------------------------------------------------ single calls

    async def result(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        timeout_s: float = READ_TIMEOUT_S,
        progress: ProgressFnT | None = None,
        input_responses: dict[str, Any] | None = None,
        request_state: str | None = None,
    ) -> CallToolResult | TaskHandle | InputRequiredResult:
        """One tool call (sent again on a new connection if the connection breaks); a refusal
        raises the ToolError for its text."""

        async def call(client: Client) -> Any:
            return await client.session.call_tool(
                tool,
                arguments,
                read_timeout_seconds=timeout_s,
                progress_callback=progress,
                input_responses=input_responses,
                request_state=request_state,
                allow_input_required=True,
                allow_claimed=True,
            )

        result = await self.connection.call(call)
        if isinstance(result, TaskHandle | InputRequiredResult):
            return result
        if not isinstance(result, CallToolResult):
            raise ProtocolError(0, f"{tool} answered with an unexpected result: {type(result).__name__}")
        if result.is_error:
            raise tool_error(tool, _text(result))
        return result

    async def read(self, tool: str, arguments: dict[str, Any], model: type[M], **options: Any) -> M:
        """A call that does not start a turn, read as `model`."""
        result = await self.result(tool, arguments, **options)
        if not isinstance(result, CallToolResult):
            raise ProtocolError(0, f"{tool} answered with {type(result).__name__}, which only turn calls do")
        return model.model_validate(result.structured_content)

    # ------------------------------------------------------------------ events

    def subscribe(self, session_id: str, stream: MemoryObjectSendStream[Event]) -> None:
        self._subscribers.setdefault(session_id, set()).add(stream)

    def unsubscribe(self, session_id: str, stream: MemoryObjectSendStream[Event]) -> None:
        streams = self._subscribers.get(session_id, set())
        streams.discard(stream)
        if not streams:
            self._subscribers.pop(session_id, None)

    def _progress(self, session_id: str | None, on_event: OnEvent | None) -> ProgressFnT | None:
        """The progress callback of a call, when someone listens: progress costs the server a
        notification per event and the client a parse (bench/README.md), so it is asked only then."""
        if on_event is None and not self._subscribers.get(session_id or ""):
            return None

        async def report(progress: float, total: float | None, message: str | None) -> None:
            for event in from_progress(message):
                if on_event is not None:
                    await resolved(on_event(event))
                for stream in list(self._subscribers.get(session_id or "", ())):
                    try:
                        stream.send_nowait(event)
                    except anyio.WouldBlock:
                        pass  # a reader that fell this far behind loses events, not the turn
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        self.unsubscribe(session_id or "", stream)

        return report

    # ------------------------------------------------------------------ turns

    async def turn(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        session_id: str | None,
        handlers: Handlers,
        wait: bool = True,
    ) -> Outcome:
        """Make a turn call and follow the turn until it rests (or, with wait=False, return at once)."""
        asked: set[str] = set()  # interrupts offered to the callbacks, each once
        outcome = await self._once(tool, arguments, session_id, handlers, asked, wait)
        if not wait:
            return outcome
        repeat = (tool, arguments) if tool in _REPEATABLE else None
        return await self.settle(outcome, handlers, repeat, asked)

    async def settle(
        self,
        outcome: Outcome,
        handlers: Handlers,
        repeat: tuple[str, dict[str, Any]] | None = None,
        asked: set[str] | None = None,
    ) -> Outcome:
        """Follow `outcome` until the turn rests, or waits for what the callbacks leave undecided.
        `repeat`: the send whose repetition waits for the same turn again."""
        asked = set() if asked is None else asked
        while True:
            sid = outcome.session_id
            blocking = await self._blocking_turn(outcome) if _queued_behind_input(outcome) else None
            if blocking is not None:
                # The message waits behind a turn that waits for a person: that turn's approvals and
                # questions go to the callbacks first (else the wait would never end).
                decided = await self._decide(blocking, asked, handlers)
                if decided is None:
                    return blocking
                if repeat is not None:
                    decided = await self._once(*repeat, sid, handlers, asked, True)
                outcome = decided
            elif outcome.status == "running":
                if repeat is not None:
                    outcome = await self._once(*repeat, sid, handlers, asked, True)
                else:
                    outcome = await self._until_rest(outcome, handlers)
            elif outcome.status == "waiting_for_input":
                decided = await self._decide(outcome, asked, handlers)
                if decided is None:
                    return outcome
                outcome = decided
            else:
                return outcome

    async def _once(
        self,
        tool: str,
        arguments: dict[str, Any],
        session_id: str | None,
        handlers: Handlers,
        asked: set[str],
        wait: bool,
    ) -> Outcome:
        """One turn call, through its input-required rounds (as_person), or its task."""
        arguments = {**arguments, "wait_seconds": self.wait_s if wait else 0}
        responses: dict[str, Any] | None = None
        state: str | None = None
        for _ in range(MAX_INPUT_ROUNDS):
            result = await self.result(
                tool,
                arguments,
                timeout_s=self.wait_s + CALL_MARGIN_S,
                progress=self._progress(session_id, handlers.on_event),
                input_responses=responses,
                request_state=state,
            )
            if isinstance(result, InputRequiredResult):
                # The retry carries the answers and the round's state; it never sends the message again.
                responses = dict(await self._form_answers(list(result.input_requests or {}), handlers, asked))
                state = result.request_state
                continue
            if isinstance(result, TaskHandle):
                if not wait:
                    return Outcome(
                        session_id=session_id or "", status="running", notes=[f"task {result.task_id}"]
                    )
                return await self._follow(tool, result, session_id, handlers, asked)
            return Outcome.model_validate(result.structured_content)
        raise ProtocolError(0, f"{tool} still asked for input after {MAX_INPUT_ROUNDS} rounds")

    async def _until_rest(self, outcome: Outcome, handlers: Handlers) -> Outcome:
        """Wait (get_session, as often as needed) until the session rests; return its last turn."""
        while True:
            state = await self.read(
                "get_session",
                {"session_id": outcome.session_id, "wait_seconds": self.wait_s, "messages_limit": 1},
                SessionState,
                timeout_s=self.wait_s + CALL_MARGIN_S,
                progress=self._progress(outcome.session_id, handlers.on_event),
            )
            if state.status != "running":
                last = state.last_turn
                return last or Outcome(
                    session_id=state.session_id, status="idle", session_status=state.status
                )

    async def _blocking_turn(self, queued: Outcome) -> Outcome | None:
        """The turn a queued message waits behind, when it waits for input (with a note saying so)."""
        state = await self.read(
            "get_session", {"session_id": queued.session_id, "messages_limit": 1}, SessionState
        )
        last = state.last_turn
        if state.status != "waiting_for_input" or last is None or last.status != "waiting_for_input":
            return None
        note = (
            f"Your message {queued.queued_message_id or ''} is queued behind turn {last.turn_id}, "
            "which waits for these approvals or answers."
        )
        return last.model_copy(update={"notes": [*last.notes, note]})

    async def _decide(self, outcome: Outcome, asked: set[str], handlers: Handlers) -> Outcome | None:
        """Offer the interrupts not offered yet to the callbacks; send the first decisions they
        make (all approvals in one call, or one question) and return that call's outcome."""
        sid = outcome.session_id
        decisions: list[dict[str, Any]] = []
        for interrupt in outcome.pending:
            if interrupt.kind != "approval" or interrupt.id in asked or handlers.on_approval is None:
                continue
            asked.add(interrupt.id)
            verdict = await resolved(handlers.on_approval(interrupt))
            if isinstance(verdict, bool):
                decisions.append({"interrupt_id": interrupt.id, "approved": verdict})
            elif isinstance(verdict, Reject):
                decisions.append({"interrupt_id": interrupt.id, "approved": False, "reason": verdict.reason})
        if decisions:
            arguments = {"session_id": sid, "decisions": decisions}
            return await self._once("approve", arguments, sid, handlers, asked, True)
        for interrupt in outcome.pending:
            if interrupt.kind != "question" or interrupt.id in asked or handlers.on_question is None:
                continue
            asked.add(interrupt.id)
            answer = await resolved(handlers.on_question(interrupt))
            if answer is None:
                continue
            question: dict[str, Any] = {"session_id": sid, "interrupt_id": interrupt.id}
            question |= {"decline": True} if isinstance(answer, Decline) else {"answer": answer}
            return await self._once("answer_question", question, sid, handlers, asked, True)
        return None

    # ------------------------------------------------------------------ answering as the person

    async def _pending_by_id(self) -> dict[str, PendingItem]:
        found = await self.read("list_pending", {"limit": 200}, PendingList)
        return {p.interrupt.id: p for p in found.pending}

    async def _form_answers(
        self, keys: list[str], handlers: Handlers, asked: set[str]
    ) -> dict[str, ElicitResult]:
        pending = await self._pending_by_id()
        return await forms.form_answers(keys, {i: p.interrupt for i, p in pending.items()}, asked, handlers)

    # ------------------------------------------------------------------ tasks

    async def _follow(
        self, tool: str, handle: TaskHandle, session_id: str | None, handlers: Handlers, asked: set[str]
    ) -> Outcome:
        """Poll a task until it completes (its result is the turn outcome) or waits for input that
        the callbacks do not give (as the person: through tasks/update)."""
        interval_s = min(max((handle.poll_interval_ms or 1000) / 1000, 0.05), 5.0)
        task_id = handle.task_id
        checked_at = anyio.current_time()
        while True:
            state = await self.connection.call(
                lambda client: tasks.get_task(client.session, task_id, READ_TIMEOUT_S)
            )
            if state.status == "completed":
                result = CallToolResult.model_validate(state.result or {"content": []}, by_name=False)
                if result.is_error:
                    raise tool_error(tool, _text(result))
                return Outcome.model_validate(result.structured_content)
            if state.status == "failed":
                error = state.error or {}
                raise ProtocolError(int(error.get("code", 0)), str(error.get("message", "the task failed")))
            if state.status == "cancelled":
                raise ClientError(f"task {task_id} of {tool} was cancelled, and its turn with it")
            if state.status == "input_required":
                waiting = await self._task_input(task_id, state.input_requests, session_id, handlers, asked)
                if waiting is not None:
                    return waiting
            if session_id is not None and anyio.current_time() - checked_at >= self.wait_s:
                # A task whose message waits behind another turn works until that turn ends, which
                # may wait for a person: say so as the blocking call would.
                checked_at = anyio.current_time()
                queued = Outcome(session_id=session_id, status="running", session_status="waiting_for_input")
                if await self._blocking_turn(queued) is not None:
                    return queued
            await anyio.sleep(interval_s)

    async def _task_input(
        self,
        task_id: str,
        requests: Mapping[str, Any],
        session_id: str | None,
        handlers: Handlers,
        asked: set[str],
    ) -> Outcome | None:
        """None when the task goes on (its input was given, or was decided meanwhile); else a
        waiting_for_input outcome for its input requests (keyed `approval:<id>` or `question:<id>`),
        read from list_pending, which also names the session."""
        pending = await self._pending_by_id()
        items = [pending[i] for i in map(forms.interrupt_id, requests) if i in pending]
        if not items:
            return None
        if self.as_person:
            fresh = [k for k in requests if forms.interrupt_id(k) not in asked]
            interrupts = {i: p.interrupt for i, p in pending.items()}
            answers = await forms.form_answers(fresh, interrupts, asked, handlers)
            if forms.decided(answers):
                responses = {
                    k: a.model_dump(by_alias=True, mode="json", exclude_none=True) for k, a in answers.items()
                }
                await self.connection.call(
                    lambda client: tasks.update_task(client.session, task_id, responses, READ_TIMEOUT_S)
                )
                return None
        sid = session_id or items[0].session_id
        return Outcome(
            session_id=sid,
            status="waiting_for_input",
            pending=[p.interrupt for p in items if p.session_id == sid],
            session_status="waiting_for_input",
        )
