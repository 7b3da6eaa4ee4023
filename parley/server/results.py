"""Tool results: our views as structured content plus the text that says what to do next."""

from __future__ import annotations

from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from parley.runtime.service import TurnOutcome
from parley.server.render import render_outcome
from parley.server.wire import outcome_view


def ok(model: BaseModel, text: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=model.model_dump(mode="json")
    )


def error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def outcome_result(outcome: TurnOutcome) -> CallToolResult:
    view = outcome_view(outcome)
    return ok(view, render_outcome(view))


def as_wire(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)
