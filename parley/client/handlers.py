"""The callbacks a caller gives the client: who decides approvals and questions, and who sees
events. Each may be a plain function or a coroutine function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypedDict, TypeVar

from parley.client.events import Event
from parley.client.models import Interrupt

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reject:
    """An approval callback's "no", with the reason the agent reads."""

    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Decline:
    """A question callback's refusal to answer."""


# True approves, False or Reject(...) rejects, None leaves the approval pending (the call then
# returns the outcome `waiting_for_input`, and `Session.pending` lists it).
ApprovalVerdict = bool | Reject | None
# A string answers, Decline() declines, None leaves the question pending.
QuestionVerdict = str | Decline | None

OnApproval = Callable[[Interrupt], ApprovalVerdict | Awaitable[ApprovalVerdict]]
OnQuestion = Callable[[Interrupt], QuestionVerdict | Awaitable[QuestionVerdict]]
OnEvent = Callable[[Event], Awaitable[None] | None]


class Callbacks(TypedDict, total=False):
    """The callbacks one call may give (each replaces the client's own for that call)."""

    on_approval: OnApproval | None
    on_question: OnQuestion | None
    on_event: OnEvent | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Handlers:
    on_approval: OnApproval | None = None
    on_question: OnQuestion | None = None
    on_event: OnEvent | None = None

    def over(
        self,
        on_approval: OnApproval | None = None,
        on_question: OnQuestion | None = None,
        on_event: OnEvent | None = None,
    ) -> Handlers:
        """These handlers, with the ones given for one call taking their place."""
        return replace(
            self,
            on_approval=on_approval or self.on_approval,
            on_question=on_question or self.on_question,
            on_event=on_event or self.on_event,
        )


async def resolved(value: T | Awaitable[T]) -> T:
    """The value a callback returned, awaited if it is awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value
