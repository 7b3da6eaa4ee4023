"""The ModelClient port: one call per RunModel step, given the transcript, returning text and tool calls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    # Tool results: images and audio ({type, mime_type, data}) for models that accept media.
    media: tuple[dict[str, Any], ...] = ()
    # User messages: what they carry besides text, as references ({kind, name, mime_type, size,
    # sha256, uri}; see runtime/attachments.py), with `data` (base64) or `text` once loaded for a call.
    attachments: tuple[dict[str, Any], ...] = ()
    # Assistant messages: the provider's own content (e.g. thinking blocks), replayed verbatim
    # to the same provider; another provider gets text and tool calls only.
    provider: str | None = None
    raw: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    model: str
    instructions: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...]
    options: dict[str, Any] = field(default_factory=dict)
    # A tool the model must call (a planning turn's first call with plan_tool_choice: required).
    tool_choice: str | None = None
    # The turn's plan mode and the session's plan; the instructions already say both, these are
    # for models that act on them directly (the demo model carries out an approved plan).
    mode: str | None = None
    todos: tuple[dict[str, Any], ...] = ()
    # Streamed text as it arrives (for progress); not part of the request's identity.
    on_text: Callable[[str], Awaitable[None]] | None = field(default=None, compare=False, repr=False)
    # Streamed reasoning (thinking) as it arrives, for live views; providers that stream none skip it.
    on_reasoning: Callable[[str], Awaitable[None]] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestedCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    text: str
    tool_calls: tuple[RequestedCall, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    provider: str | None = None
    raw: Any = None
    # What the provider says it ran and why it stopped (for traces; None when it does not say).
    model: str | None = None
    finish_reason: str | None = None


class ModelClient(Protocol):
    """Makes exactly one model call. Raises ModelError on a failure the turn should record."""

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
