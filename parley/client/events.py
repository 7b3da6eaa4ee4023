"""What happens in a session while a turn runs, as typed events.

Over stdio (and over HTTP without an event stream) the events come from the MCP progress
notifications parley sends a waiting caller. Those carry one line of text each
(parley/runtime/progress.py writes them), so `from_progress` reads them back by their fixed forms
("turn started", "tool NAME started", "tool NAME finished: STATUS", "turn STATUS", ...); any
other line is text the model wrote. (Model text that is exactly one of those forms would be
read as the event: the progress channel has no other way to say which is which.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The statuses a turn ends with: TURN_ENDED of parley/core/states.py, mirrored (the client
# imports nothing of the server's side of parley; tests/test_states.py checks they are the same).
TURN_END_STATUSES = frozenset({"answered", "completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class TurnStarted:
    pass


@dataclass(frozen=True, slots=True)
class Text:
    """Text the model produced: a streamed piece, or a whole step's text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolsRequested:
    """The model asked for `count` tool calls."""

    count: int


@dataclass(frozen=True, slots=True)
class ToolStarted:
    tool: str


@dataclass(frozen=True, slots=True)
class ToolFinished:
    tool: str
    status: str


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """A tool reported progress (an MCP server's own progress notifications)."""

    tool: str
    message: str


@dataclass(frozen=True, slots=True)
class InterruptRaised:
    """An approval or question now waits (only the HTTP event stream says so as it happens; over
    progress the turn's outcome lists it)."""

    interrupt_id: str
    kind: str


@dataclass(frozen=True, slots=True)
class TurnEnded:
    status: str


@dataclass(frozen=True, slots=True)
class StillWorking:
    """A beat the server sends at least every progress_interval_s while nothing else happens."""


@dataclass(frozen=True, slots=True)
class Notice:
    """Anything else the server reports: a model call retried, the context summarized, a tool
    source that could not be listed."""

    text: str


Event = (
    TurnStarted
    | Text
    | ToolsRequested
    | ToolStarted
    | ToolFinished
    | ToolProgress
    | InterruptRaised
    | TurnEnded
    | StillWorking
    | Notice
)

_TOOL_STARTED = re.compile(r"^tool (\S+) started$")
_TOOL_FINISHED = re.compile(r"^tool (\S+) finished: (\S+)$")
_TOOL_PROGRESS = re.compile(r"^tool (\S+): (.*)$", re.DOTALL)
_TURN_ENDED = re.compile(r"^turn (\S+)$")
_CALLING = re.compile(r"^(.*?) ?\(calling (\d+) tool\(s\)\)$", re.DOTALL)
_NOTICES = (
    re.compile(r"^model call attempt \d+ failed; retrying in "),
    re.compile(r"^summarized the earlier conversation to fit the model's context$"),
    re.compile(r"^could not summarize the earlier conversation; continuing without$"),
    re.compile(r"^reminded the agent to hand in its result$"),
)


def from_progress(message: str | None) -> list[Event]:
    """The events one progress message stands for (usually one; a step's text and its tool
    request come in one message)."""
    if not message:
        return []
    if message == "turn started":
        return [TurnStarted()]
    if message == "still working":
        return [StillWorking()]
    if found := _TOOL_STARTED.match(message):
        return [ToolStarted(found.group(1))]
    if found := _TOOL_FINISHED.match(message):
        return [ToolFinished(found.group(1), found.group(2))]
    if (found := _TURN_ENDED.match(message)) and found.group(1) in TURN_END_STATUSES:
        return [TurnEnded(found.group(1))]
    if any(p.match(message) for p in _NOTICES):
        return [Notice(message)]
    if found := _TOOL_PROGRESS.match(message):
        return [ToolProgress(found.group(1), found.group(2))]
    if found := _CALLING.match(message):
        text, count = found.group(1), int(found.group(2))
        return [*([Text(text)] if text else []), ToolsRequested(count)]
    return [Text(message)]


# The HTTP event stream (`GET /v1/sessions/{id}/events`) sends each stored event as
# `{"seq", "kind", "data": {...}, ...}`; sse.py reads the frames and hands `kind` and `data` here.
_STREAM_NOTICES = {
    "attempt_discarded": "the model call failed part-way; disregard its text above",
    "compacted": "summarized the earlier conversation to fit the model's context",
    "compaction_failed": "could not summarize the earlier conversation; continuing without",
    "nudged": "reminded the agent to hand in its result",
}


def from_stream(kind: str, data: Mapping[str, Any]) -> list[Event]:
    """The events one stored session event stands for (kinds a client has no event for: none)."""
    tool = str(data.get("tool") or "")
    if kind == "turn_started":
        return [TurnStarted()]
    if kind == "text_delta":
        return [Text(str(data.get("text") or ""))] if data.get("text") else []
    if kind == "model_step":
        calls = int(data.get("tool_calls") or 0)
        text = str(data.get("text") or "")
        return [*([Text(text)] if text else []), *([ToolsRequested(calls)] if calls else [])]
    if kind == "tool_started":
        return [ToolStarted(tool)]
    if kind == "tool_finished":
        return [ToolFinished(tool, str(data.get("status") or ""))]
    if kind == "tool_progress":
        return [ToolProgress(tool, str(data.get("message") or data.get("progress") or ""))]
    if kind == "interrupt_raised":
        return [InterruptRaised(str(data.get("interrupt_id") or ""), str(data.get("kind") or ""))]
    if kind == "turn_ended":
        return [TurnEnded(str(data.get("status") or ""))]
    if kind == "model_retry":
        return [
            Notice(f"model call attempt {data.get('attempt')} failed; retrying in {data.get('retry_in_s')}s")
        ]
    if kind in _STREAM_NOTICES:
        return [Notice(_STREAM_NOTICES[kind])]
    return []
