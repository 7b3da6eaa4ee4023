"""Compaction: before a model call would overflow the context, summarize the older part of the
conversation and continue on summary + recent messages. The stored transcript is never cut;
only what the model is shown changes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parley.config import CompactionConfig
from parley.core.records import MessageRecord
from parley.runtime.model import ChatMessage, ToolSpec

COMPACTION_INSTRUCTION = (
    "You compress conversations. Write a faithful, compact summary of the conversation you are given: "
    "the user's goals and requests, decisions made, facts learned (including tool results that still "
    "matter), and what remains open. Write it for yourself, to continue the conversation from it."
)
SUMMARY_REQUEST = "Summarize the conversation above now, as instructed. Answer with the summary only."
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"

# Context windows (tokens) of model families, by name prefix; an agent's setting wins.
KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-", 200_000),
    ("gpt-4.1", 1_000_000),
    ("gpt-4o", 128_000),
    ("gpt-5", 400_000),
    ("o3", 200_000),
    ("o4", 200_000),
)
# Tokens are estimated at one per four characters, the same estimate the demo model reports.
CHARS_PER_TOKEN = 4


def context_window(model_name: str, config: CompactionConfig) -> int | None:
    if config.context_window is not None:
        return config.context_window
    return next((size for prefix, size in KNOWN_WINDOWS if model_name.startswith(prefix)), None)


def estimate_tokens(
    messages: Sequence[ChatMessage], instructions: str = "", tools: Sequence[ToolSpec] = ()
) -> int:
    chars = len(instructions)
    for m in messages:
        chars += len(m.text) + sum(len(c.name) + len(json.dumps(c.arguments)) for c in m.tool_calls)
        chars += sum(_attachment_chars(a) for a in m.attachments)
    chars += sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in tools)
    return chars // CHARS_PER_TOKEN + 1


# What an image or a sound is counted as (providers charge about 1,600 tokens for a large image).
ATTACHMENT_CHARS = 1600 * CHARS_PER_TOKEN


def _attachment_chars(item: dict[str, Any]) -> int:
    """A document counts as its text; anything else as a large image."""
    text = item.get("text")
    return len(text) if isinstance(text, str) else ATTACHMENT_CHARS


def _record_tokens(records: Sequence[MessageRecord]) -> int:
    return sum(len(json.dumps(r.content)) for r in records) // CHARS_PER_TOKEN + 1


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    prefix: list[MessageRecord]
    upto_seq: int


def plan(
    visible: Sequence[MessageRecord],
    prompt_tokens: int,
    window: int,
    config: CompactionConfig,
    turn_start_seq: int,
    force: bool = False,
) -> CompactionPlan | None:
    """Which older messages to summarize, or None when the prompt fits (or nothing can go).

    Cuts only just before a user message, so a tool call never loses its result, and never
    inside the current turn, so the newest exchange is always kept verbatim."""
    if not force and prompt_tokens <= config.trigger_ratio * window:
        return None
    boundaries = [
        r.seq for r in visible if r.role == "user" and not r.content.get("nudge") and r.seq <= turn_start_seq
    ]
    if not visible or not boundaries:
        return None
    budget = config.retained_ratio * window
    cut = boundaries[-1]
    for seq in boundaries:
        if seq > visible[0].seq and _record_tokens([r for r in visible if r.seq >= seq]) <= budget:
            cut = seq
            break
    prefix = [r for r in visible if r.seq < cut]
    if not prefix:
        return None
    return CompactionPlan(prefix=prefix, upto_seq=prefix[-1].seq)


def summary_message(text: str) -> ChatMessage:
    return ChatMessage(role="user", text=SUMMARY_PREFIX + text)


def is_helpful(summary: str, prefix_tokens: int) -> bool:
    """An empty summary, or one no shorter than what it replaces, is not worth using."""
    return bool(summary.strip()) and len(summary) // CHARS_PER_TOKEN < prefix_tokens
