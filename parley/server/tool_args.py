"""The argument types and annotations the published tools share."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

# Every argument is strict: "yes" is not true, "1" and true are not 1, 1.5 is not an int.
# Clients that send the wrong JSON type get an error naming the field instead of a guess.
SessionIdArg = Annotated[
    str,
    Field(
        strict=True,
        description="The session's id (ses_ followed by 32 hex digits), from start_session or list_sessions.",
        json_schema_extra={"x-mcp-header": "Session-Id"},
    ),
]
WaitArg = Annotated[
    float | None,
    Field(
        strict=True,  # an int is a float here, a bool is not
        ge=0,
        allow_inf_nan=False,
        description=(
            "How long to wait, in seconds, for the turn to end before returning status 'running' "
            "(default about 45, capped by the server). The turn keeps running either way."
        ),
    ),
]
ClientMessageIdArg = Annotated[
    str | None,
    Field(
        strict=True,
        description=(
            "Your id for this message (e.g. a UUID). A retry with the same id returns the turn the first "
            "call started instead of sending the message twice."
        ),
    ),
]
SettingsArg = Annotated[
    dict[str, Any] | None,
    Field(
        strict=True,
        description=(
            'Session settings from this message\'s turn on: {"model": "<name>"} (one of the models this '
            'server offers, see list_agents), {"limits": {...}} (lower than the agent\'s), {"enabled_tools": '
            '["ask_user", ...]} (a subset of the agent\'s tools; null: all). A running turn keeps its settings.'
        ),
    ),
]
AttachmentsArg = Annotated[
    list[dict[str, Any]] | None,
    Field(
        strict=True,
        description=(
            "Files the message carries, as MCP content blocks: "
            '{"type": "image", "data": "<base64>", "mimeType": "image/png", "name"?: "shot.png"}, '
            '{"type": "audio", "data": "<base64>", "mimeType": "audio/wav"}, '
            '{"type": "resource", "resource": {"uri": "file:///notes.md", "mimeType": "text/markdown", '
            '"text": "..."}} (or "blob": "<base64>"), {"type": "resource_link", "uri": "...", "name": "..."}. '
            "Sizes, count and media types are limited by the server; models that cannot take a kind read a "
            "description of it."
        ),
    ),
]

# Message sequence numbers are SQLite integers (signed 64-bit).
MAX_SEQUENCE_NUMBER = 2**63 - 1


class DecisionArg(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    interrupt_id: str = Field(description="The approval's id (int_...).")
    approved: bool = Field(description="true runs the call; false does not.")
    reason: str | None = Field(None, description="Why; the agent reads it.")


READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
SENDS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)
DECIDES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
STOPS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
# Makes something new and changes nothing there is (fork_session): not idempotent, each call one more.
CREATES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
# Destructive and idempotent, like STOPS; removes data for good.
DELETES = STOPS
