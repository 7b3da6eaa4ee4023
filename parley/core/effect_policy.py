"""What a mishap means for a tool call, by its effect (docs/mcp-servers.md#calls): retry it, or end it as
`failed` or `outcome_unknown`, and what the model reads then. One table; every caller asks it.

| effect                            | not sent              | maybe sent / interrupted          | fate unknown     |
|-----------------------------------|-----------------------|-----------------------------------|------------------|
| read                              | retry, then failed    | retry, then failed                | failed           |
| idempotent_write                  | retry, then failed    | retry (same key), then unknown    | outcome_unknown  |
| non_idempotent_write, unclassified| failed                | outcome_unknown                   | outcome_unknown  |

A call an ending turn leaves unfinished is `cancelled` if it never ran, and `outcome_unknown` if
its downstream task was under way (unless it only reads).

"failed" always tells the model the call is safe to make again; "outcome_unknown" tells it the
write may have happened. An `isError` result is an answer, never a mishap.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

# Attempts of a call whose effect makes a retry safe.
MAX_ATTEMPTS = 3
RETRYABLE_EFFECTS = frozenset({"read", "idempotent_write"})

Ending = Literal["failed", "outcome_unknown"]


class Mishap(StrEnum):
    NOT_SENT = "not_sent"  # the request provably never reached the server
    MAYBE_SENT = "maybe_sent"  # the connection broke or timed out after the request was sent
    INTERRUPTED = "interrupted"  # the process stopped while the call ran; found running at recovery
    FATE_UNKNOWN = "fate_unknown"  # no retry possible and no answer: a lost task, an unreadable result


@dataclass(frozen=True, slots=True)
class Verdict:
    """Retry (`retry` is true, `ending` None) or end the call as `ending` with `text`."""

    retry: bool
    ending: Ending | None = None
    text: str = ""


def retryable(effect: str) -> bool:
    return effect in RETRYABLE_EFFECTS


def start_must_be_durable(effect: str) -> bool:
    """Whether the commit that marks a call started must be on disk, not only handed to the
    operating system, before the call is sent: a call that cannot be retried must never look
    unsent after a power loss, or it would be sent again."""
    return not retryable(effect)


def judge(effect: str, mishap: Mishap, attempts: int, detail: str) -> Verdict:
    """The verdict on a call of `effect` after `attempts` attempts ended in `mishap`; `detail`
    says what happened, in a sentence the model reads."""
    if mishap in (Mishap.NOT_SENT, Mishap.MAYBE_SENT, Mishap.INTERRUPTED) and (
        retryable(effect) and attempts < MAX_ATTEMPTS
    ):
        return Verdict(retry=True)
    if mishap is Mishap.NOT_SENT:
        return Verdict(False, "failed", f"{detail} The call did not run, so it is safe to call again later.")
    if effect == "read":
        tried = f" (after {attempts} attempts)" if attempts > 1 else ""
        return Verdict(False, "failed", f"{detail}{tried} It only reads, so it is safe to call again.")
    return Verdict(
        False,
        "outcome_unknown",
        f"{detail} It may or may not have taken effect ({effect}); check before calling it again.",
    )


def abandoned_status(effect: str, status: str) -> Literal["cancelled", "outcome_unknown"]:
    """A call the ending turn (cancelled, steered, failed, limited) leaves unfinished. One that never
    ran is cancelled; one whose downstream task was under way may have had its effect, unless it
    only reads."""
    if status == "waiting_for_task" and effect != "read":
        return "outcome_unknown"
    return "cancelled"
