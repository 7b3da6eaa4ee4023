"""A session handle: one conversation with an agent."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Unpack

import anyio

from parley.client.calls import EVENT_BUFFER, Calls
from parley.client.errors import ClientError
from parley.client.events import Event
from parley.client.handlers import Callbacks, Handlers, OnApproval, OnEvent, OnQuestion
from parley.client.models import Closed, Deleted, Interrupt, Outcome, QueuedMessageDeleted, SessionState

if TYPE_CHECKING:
    from parley.client.sse import EventStream


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

    # ------------------------------------------------------------------ messages

    async def send(
        self,
        message: str,
        *,
        steer: bool = False,
        settings: dict[str, Any] | None = None,
        on_approval: OnApproval | None = None,
        on_question: OnQuestion | None = None,
        on_event: OnEvent | None = None,
        wait: bool = True,
    ) -> Outcome:
        """Send a message and follow its turn until it rests: through `running`, and through the
        approvals and questions the callbacks decide. With wait=False, return at once (`running`,
        or `answered` for a quick turn); `wait()` follows it later."""
        arguments: dict[str, Any] = {
            "session_id": self.id,
            "message": message,
            "client_message_id": new_message_id(),
        }
        if steer:
            arguments["steer"] = True
        if settings is not None:
            arguments["settings"] = settings
        handlers = self._calls.handlers.over(on_approval, on_question, on_event)
        return self._seen(
            await self._calls.turn(
                "send_message", arguments, session_id=self.id, handlers=handlers, wait=wait
            )
        )

    async def steer(self, message: str, **options: Any) -> Outcome:
        """Send a message that stops the running turn after its current step and is answered next."""
        return await self.send(message, steer=True, **options)

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
        """Delete the session and everything of it, for good."""
        return await self._calls.read("delete_session", {"session_id": self.id}, Deleted)

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

    async def events(self) -> AsyncIterator[Event]:
        """What happens in the session, as it happens, until you stop reading.

        Over HTTP, from the server's event stream (`/v1/sessions/{id}/events`) when it offers one.
        Otherwise (stdio, or a server without the stream) from the progress of this client's own
        calls on the session: the turns it sends, resumes, waits for (`wait()`) or cancels."""
        if self._event_stream is not None:
            stream = await self._event_stream.open(self.id)
            if stream is not None:
                async with stream:
                    async for event in stream:
                        yield event
                return
        send, receive = anyio.create_memory_object_stream[Event](EVENT_BUFFER)
        self._calls.subscribe(self.id, send)
        try:
            async with receive:
                async for event in receive:
                    yield event
        finally:
            self._calls.unsubscribe(self.id, send)
            send.close()

    def _seen(self, outcome: Outcome) -> Outcome:
        self.last = outcome
        return outcome
