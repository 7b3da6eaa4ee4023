"""How one tool call went: a final status with its stored result, or a wait at its MCP server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from parley.core.effect_policy import Mishap, Verdict, judge

# Final (succeeded, failed, outcome_unknown), or a wait at the call's MCP server.
RunStatus = Literal["succeeded", "failed", "outcome_unknown", "waiting_for_task", "awaiting_answer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRun:
    # succeeded | failed | outcome_unknown (final); waiting_for_task: `remote` says which
    # downstream task to poll, at `wake_at`; awaiting_answer: `remote` holds the server's
    # questions and the state to send back with the answers.
    status: RunStatus
    result: dict[str, Any]
    todos: list[dict[str, Any]] | None = None
    remote: dict[str, Any] | None = None
    wake_at: float | None = None
    # awaiting_answer for want of the owner's token at a user_oauth server: the call parks with
    # an authorization_required interrupt, asking for these scopes (empty: the configured ones).
    authorize: tuple[str, ...] | None = None
    # ...at this server (a resource or prompt read names it in its arguments, not as its own).
    authorize_at: str | None = None

    @property
    def waits(self) -> bool:
        return self.status == "waiting_for_task"


def failed(text: str) -> ToolRun:
    return ToolRun(status="failed", result={"text": text, "is_error": True})


def ended(verdict: Verdict) -> ToolRun:
    """The call's final record for a verdict that ends it."""
    assert verdict.ending is not None, "a verdict to retry does not end the call"
    return ToolRun(status=verdict.ending, result={"text": verdict.text, "is_error": True})


def by_effect(effect: str, text: str) -> ToolRun:
    """A call whose fate is unknown (a lost task, an unreadable result): the effect policy says
    what it becomes and what the model reads."""
    return ended(judge(effect, Mishap.FATE_UNKNOWN, 1, text))
