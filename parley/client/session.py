"""A session handle: one conversation with an agent."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

import anyio
from mcp.types import AudioContent, CallToolResult, EmbeddedResource, ImageContent, TextResourceContents

from parley.client.calls import EVENT_BUFFER, Calls
from parley.client.errors import ClientError
from parley.client.events import Event
from parley.client.handlers import Callbacks, Handlers, OnApproval, OnEvent, OnQuestion
from parley.client.models import (
    Closed,
    Deleted,
    Interrupt,
    Outcome,
    Plan,
    QueuedMessageDeleted,
    SessionState,
    SessionSummary,
)

if TYPE_CHECKING:
    from parley.client.sse import EventStream, SessionEvents


def new_message_id() -> str:
    """A client_message_id: a retried call carries the same one, so the message is sent once."""
    return f"cm_{uuid.uuid4().hex}"


def _ids(interrupts: tuple[Interrupt | str, ...]) -> list[str]:
    return [i.id if isinstance(i, Interrupt) else i for i in interrupts]


class Session:
    """One conversation with an agent. `last` is the latest outcome this handle has seen; `answer`,
    `result` and `pending` read it."""

    def __init__(
        self,
        calls: Calls,
        session_id: str,
        *,
        agent: str | None = None,
        last: Outcome | None = None,
        event_stream: EventStream | None = None,
    ) -> None:
        self._calls = calls
        self._event_stream = event_stream
        self.id = session_id
        self.agent = agent
        self.last = last

    def __repr__(self) -> str:
        return f"Session({self.id!r}, agent={self.agent!r}, status={self.status!r})"

    @property
    def status(self) -> str | None:
        """The status of the latest outcome (answered, waiting_for_input, running, ...)."""
        return self.last.status if self.last else None

    @property
    def answer(self) -> str | None:
        return self.last.answer if self.last else None

    @property
    def result(self) -> Any:
        """A task session's accepted result."""
        return self.last.result if self.last else None

    @property
    def pending(self) -> list[Interrupt]:
        """The approvals and questions the latest outcome waits for."""
        return list(self.last.pending) if self.last and self.last.status == "waiting_for_input" else []

    @property
    def plan(self) -> Plan | None:
        """The session's plan after the latest outcome (plan mode; None: it has none)."""
        return self.last.plan if self.last else None

    # ------------------------------------------------------------------ messages

    async def send(
        self,
        message: str,
        *,
        steer: bool = False,
        settings: dict[str, Any] | None = None,
        attachments: Sequence[Mapping[str, Any]] | None = None,
        on_approval: OnApproval | None = None,
        on_question: OnQuestion | None = None,
        on_event: OnEvent | None = None,
        wait: bool = True,
        plan: bool = False,
    ) -> Outcome:
        """Send a message and follow its turn until it rests: through `running`, and through the
        approvals and questions the callbacks decide. With wait=False, return at once (`running`,
        or `answered` for a quick turn); `wait()` follows it later. `attachments` are MCP content
        blocks (see parley.client.attachments). `plan=True` (agents with plan mode) makes it a
        planning turn: read-only, it writes a plan you approve with `execute_plan`; while a draft
        waits, every message plans."""
        arguments: dict[str, Any] = {
            "session_id": self.id,
            "message": message,
            "client_message_id": new_message_id(),
        }
        if steer:
            arguments["steer"] = True
        if settings is not None:
            arguments["settings"] = settings
        if attachments:
            arguments["attachments"] = [dict(a) for a in attachments]
        if plan:
            arguments["plan"] = True
        handlers = self._calls.handlers.over(on_approval, on_question, on_event)
        return self._seen(
            await self._calls.turn(
                "send_message", arguments, session_id=self.id, handlers=handlers, wait=wait
            )
        )

    async def steer(
        self, message: str, *, settings: dict[str, Any] | None = None, **callbacks: Unpack[Callbacks]
    ) -> Outcome:
        """Send a message that stops the running turn after its current step and is answered next."""
        return await self.send(message, steer=True, settings=settings, **callbacks)

    async def delete_queued(self, queued_message_id: str) -> QueuedMessageDeleted:
        return await self._calls.read(
            "delete_queued_message",
            {"session_id": self.id, "queued_message_id": queued_message_id},
            QueuedMessageDeleted,
        )

    # ------------------------------------------------------------------ decisions

    async def approve(
        self, *interrupts: Interrupt | str, reason: str | None = None, **callbacks: Unpack[Callbacks]
    ) -> Outcome:
        """Approve these approvals (default: every pending one) and follow the resumed turn.
        `callbacks` (on_approval, on_question, on_event) handle what the turn asks next."""
        return await self._decide(interrupts, True, reason, callbacks)

    async def reject(
        self, *interrupts: Interrupt | str, reason: str | None = None, **callbacks: Unpack[Callbacks]
    ) -> Outcome:
        """Reject these approvals (default: every pending one); the agent reads `reason`."""
        return await self._decide(interrupts, False, reason, callbacks)

    async def answer_question(
        self, question: Interrupt | str, text: str, **callbacks: Unpack[Callbacks]
    ) -> Outcome:
        """Answer a question and follow the resumed turn."""
        return await self._answer(question, {"answer": text}, callbacks)

    async def decline(self, question: Interrupt | str, **callbacks: Unpack[Callbacks]) -> Outcome:
        """Decline to answer a question."""
        return await self._answer(question, {"decline": True}, callbacks)

    # ------------------------------------------------------------------ plans

    async def execute_plan(
        self, revision: int, *, wait: bool = True, **callbacks: Unpack[Callbacks]
    ) -> Outcome:
        """Approve the draft plan at exactly `revision` (the one you reviewed: `plan.revision`) and
        follow the executing turn until it rests. PlanRefused, and nothing changes, when the plan
        moved on to another revision, has no draft, or the session is busy. Approving grants
        nothing else: a tool call that needs approval still asks (the callbacks decide it)."""
        arguments: dict[str, Any] = {"session_id": self.id, "revision": revision}
        handlers = self._calls.handlers.over(**callbacks)
        return self._seen(
            await self._calls.turn(
                "execute_plan", arguments, session_id=self.id, handlers=handlers, wait=wait
            )
        )

    async def discard_plan(self) -> SessionSummary:
        """Drop the draft plan without acting on it; the next message is an ordinary turn.
        PlanRefused when there is no draft or a turn runs."""
        summary = await self._calls.read("discard_plan", {"session_id": self.id}, SessionSummary)
        if self.last is not None and self.last.plan is not None:
            cleared = Plan(status=summary.plan_status, revision=summary.plan_revision, todos=[])
            self.last = self.last.model_copy(update={"plan": cleared})
        return summary

    async def _decide(
        self,
        interrupts: tuple[Interrupt | str, ...],
        approved: bool,
        reason: str | None,
        callbacks: Callbacks,
    ) -> Outcome:
        ids = _ids(interrupts) or [i.id for i in self.pending if i.kind == "approval"]
        if not ids:
            raise ClientError(f"session {self.id} has no pending approval to decide (see Session.pending)")
        decisions = [
            {"interrupt_id": i, "approved": approved} | ({"reason": reason} if reason else {}) for i in ids
        ]
        return await self._turn("approve", {"session_id": self.id, "decisions": decisions}, callbacks)

    async def _answer(self, question: Interrupt | str, what: dict[str, Any], callbacks: Callbacks) -> Outcome:
        [interrupt_id] = _ids((question,))
        arguments = {"session_id": self.id, "interrupt_id": interrupt_id, **what}
        return await self._turn("answer_question", arguments, callbacks)

    async def _turn(self, tool: str, arguments: dict[str, Any], callbacks: Callbacks) -> Outcome:
        handlers = self._calls.handlers.over(**callbacks)
        return self._seen(await self._calls.turn(tool, arguments, session_id=self.id, handlers=handlers))

    # ------------------------------------------------------------------ following and stopping

    async def wait(
        self,
        *,
        on_approval: OnApproval | None = None,
        on_question: OnQuestion | None = None,
        on_event: OnEvent | None = None,
    ) -> Outcome:
        """Wait until the session rests; the callbacks decide what it waits for on the way."""
        handlers = self._calls.handlers.over(on_approval, on_question, on_event)
        running = Outcome(
            session_id=self.id, status="running", turn_id=self.last.turn_id if self.last else None
        )
        return self._seen(await self._calls.settle(running, handlers))

    async def cancel(self) -> Outcome:
        """Cancel the running turn (a tool call that already started finishes and is kept)."""
        arguments: dict[str, Any] = {"session_id": self.id}
        outcome = await self._calls.turn("cancel_turn", arguments, session_id=self.id, handlers=Handlers())
        return self._seen(outcome)

    async def close(self) -> Closed:
        """End the session: cancel its turn, drop its queued messages; it stays readable."""
        return await self._calls.read(
            "close_session", {"session_id": self.id, "wait_seconds": self._calls.wait_s}, Closed
        )

    async def delete(self) -> Deleted:
        """Delete the session and everything of it, for good (a running turn is cancelled first)."""
        return await self._calls.read(
            "delete_session", {"session_id": self.id, "wait_seconds": self._calls.wait_s}, Deleted
        )

    async def update(self, *, title: str | None = None, tags: list[str] | None = None) -> SessionSummary:
        """Set the title ("" removes it) and/or replace the tags (update_session)."""
        arguments: dict[str, Any] = {"session_id": self.id}
        if title is not None:
            arguments["title"] = title
        if tags is not None:
            arguments["tags"] = tags
        return await self._calls.read("update_session", arguments, SessionSummary)

    async def attachment(self, sha256: str) -> bytes:
        """The bytes of an attachment a message of this session carried (its `sha256` from a
        message's attachments), read with get_session over whatever transport this client uses."""
        result = await self._calls.result(
            "get_session", {"session_id": self.id, "messages_limit": 1, "attachment": sha256}
        )
        if not isinstance(result, CallToolResult):
            raise ClientError(f"get_session answered with {type(result).__name__}")
        for block in result.content[1:]:
            if isinstance(block, ImageContent | AudioContent):
                return base64.b64decode(block.data)
            if isinstance(block, EmbeddedResource):
                contents = block.resource
                if isinstance(contents, TextResourceContents):
                    return contents.text.encode("utf-8")
                return base64.b64decode(contents.blob)
        raise ClientError(f"get_session sent no bytes for attachment {sha256}")

    async def state(
        self, *, messages_from: int | None = None, messages_limit: int | None = None
    ) -> SessionState:
        """Read the session (get_session) without waiting."""
        arguments: dict[str, Any] = {"session_id": self.id}
        if messages_from is not None:
            arguments["messages_from"] = messages_from
        if messages_limit is not None:
            arguments["messages_limit"] = messages_limit
        state = await self._calls.read("get_session", arguments, SessionState)
        self.agent = state.agent
        return state

    def events(self) -> EventFeed:
        """What happens in the session, as it happens, until you stop reading (`aclose()`, or use
        it as `async with s.events() as feed:`).

        Over HTTP, from the server's event stream (`/v1/sessions/{id}/events`) when it offers one,
        from the moment the feed is entered (`async with`) or first read, whoever makes the calls;
        the stream is reopened where it stopped if it drops. Otherwise (stdio, or a server without the stream) from the progress of this client's own
        calls on the session made from the moment `events()` is called: the turns it sends,
        resumes, waits for (`wait()`) or cancels."""
        return EventFeed(self._calls, self.id, self._event_stream)

    def _seen(self, outcome: Outcome) -> Outcome:
        self.last = outcome
        return outcome


class EventFeed:
    """A session's events from the moment the feed was made (see `Session.events`)."""

    def __init__(self, calls: Calls, session_id: str, event_stream: EventStream | None) -> None:
        self._calls = calls
        self._session_id = session_id
        self._event_stream = event_stream
        self._send, self._receive = anyio.create_memory_object_stream[Event](EVENT_BUFFER)
        # Subscribed now, not at the first read: a send made right after sees it, so it asks the
        # server for progress (calls nobody listens to do not).
        calls.subscribe(session_id, self._send)
        self._stream: SessionEvents | None = None
        self._stream_events: AsyncIterator[Event] | None = None

    def __aiter__(self) -> EventFeed:
        return self

    async def _open_stream(self) -> None:
        if self._event_stream is not None:
            opener, self._event_stream = self._event_stream, None  # tried once
            self._stream = await opener.open(self._session_id)
            if self._stream is not None:
                self._calls.unsubscribe(self._session_id, self._send)  # the stream carries it all
                self._stream_events = aiter(self._stream)

    async def __anext__(self) -> Event:
        await self._open_stream()
        if self._stream_events is not None:
            return await anext(self._stream_events)
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._calls.unsubscribe(self._session_id, self._send)
        self._send.close()
        self._receive.close()
        if self._stream is not None:
            await self._stream.close()

    async def __aenter__(self) -> EventFeed:
        # The event stream follows from where it opens: open it now, so whatever the block does
        # next is seen, whenever the first read comes.
        await self._open_stream()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
