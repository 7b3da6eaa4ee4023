"""How one tool call went: a final status with its stored result, or a wait at its MCP server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRun:
    # succeeded | failed | outcome_unknown (final); waiting_for_task: `remote` says which
    # downstream task to poll, at `wake_at`; awaiting_answer: `remote` holds the server's
    # questions and the state to send back with the answers.
    status: str
    result: dict[str, Any]
    todos: list[dict[str, Any]] | None = None
    remote: dict[str, Any] | None = None
    wake_at: float | None = None

    @property
    def waits(self) -> bool:
        return self.status == "waiting_for_task"


def failed(text: str) -> ToolRun:
    return ToolRun(status="failed", result={"text": text, "is_error": True})


def by_effect(effect: str, text: str) -> ToolRun:
    """A call whose fate is unknown: a read changed nothing and may simply be made again; any
    other call may have had its effect, and the model is told so."""
    if effect == "read":
        return failed(f"{text} It only reads, so it is safe to call again.")
    return ToolRun(
        status="outcome_unknown",
        result={
            "text": f"{text} It may or may not have taken effect ({effect}); check before calling it again.",
            "is_error": True,
        },
    )
