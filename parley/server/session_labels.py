"""The update_session tool (its arguments and handler, a row in tools.py) and the arguments
list_sessions narrows by (title text, tag, creation time): what people name sessions and find
them by (rules in runtime/session_labels.py)."""

from __future__ import annotations

from typing import Annotated

from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from parley.runtime.service import SessionService
from parley.runtime.session_labels import TAG_RULE, TAGS_MAX, TITLE_MAX_CHARS
from parley.server.results import ok
from parley.server.tool_args import SessionIdArg
from parley.server.tool_table import ToolArguments
from parley.server.turn_calls import Caller
from parley.server.wire import SessionSummary, session_summary

TitleFilterArg = Annotated[
    str | None,
    Field(strict=True, description="Only sessions whose title contains this text (any case)."),
]
TagFilterArg = Annotated[str | None, Field(strict=True, description="Only sessions carrying this tag.")]
CreatedAfterArg = Annotated[
    str | None,
    Field(
        strict=True,
        description="Only sessions created at or after this ISO 8601 date or time (e.g. 2026-11-30, "
        "2026-11-30T12:00:00Z; UTC when no offset is given).",
    ),
]
CreatedBeforeArg = Annotated[
    str | None,
    Field(strict=True, description="Only sessions created before this ISO 8601 date or time."),
]

# Changes what is stored, the same way each time; removes nothing of the conversation.
LABELS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


def render_labels(view: SessionSummary) -> str:
    title = f'"{view.title}"' if view.title else "(none)"
    tags = ", ".join(view.tags) if view.tags else "(none)"
    return f"Session {view.session_id}: title {title}, tags {tags}."


class UpdateSessionArguments(ToolArguments):
    session_id: SessionIdArg
    title: Annotated[
        str | None,
        Field(
            strict=True,
            description=f'The session\'s new title (one line, at most {TITLE_MAX_CHARS} characters); "" removes it.',
        ),
    ] = None
    tags: Annotated[
        list[str] | None,
        Field(
            strict=True,
            description=f"The session's tags, replacing the ones it has ([] removes them; at most {TAGS_MAX}); "
            f"{TAG_RULE}.",
        ),
    ] = None


async def update_session(
    service: SessionService, caller: Caller, args: UpdateSessionArguments
) -> CallToolResult:
    """Name a session and tag it, to find it again with list_sessions(title=..., tag=...). A
    session gets a title from its first message until you give it one."""
    session = await service.lifecycle.update_session(caller.who, args.session_id, args.title, args.tags)
    view = session_summary(session)
    return ok(view, render_labels(view))
