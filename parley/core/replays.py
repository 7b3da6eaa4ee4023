"""A replay's rules: which calls of a replayed turn run for real, and what the others get.

A replay re-sends a session's messages to a new session (on another agent version, say). It
must never repeat a real-world write, so a call runs for real only when parley's configuration
classifies its tool as `read` (never on a server's own annotations), or when it changes nothing
but the replay session itself (write_todos, set_result). Any other call is settled as it is asked
for: with the recorded result of a call of the original session with the same tool and the same
arguments (compared as canonical JSON, each recorded result used at most once), or, without one,
with a clear "not replayed" result. A new question is declined; a durable wait completes at once.
A question a downstream server asks during a call that runs (a read, or its MCP task) gets the
answer the original gave the same question of a call with the same tool and arguments, or is
declined: a replay never waits for a person.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from parley.core.records import InterruptRecord, Resolution, SettledCall, ToolCallRecord

# The event flag of a call a replay settled (see turn_steps.model_step).
REPLAYED = "replayed"
# Built-ins that change nothing but the replay session: they run.
SESSION_ONLY = frozenset({"write_todos", "set_result"})
ASK_USER = "ask_user"
DURABLE_WAIT = "durable_wait"

NOT_REPLAYED = (
    "Not replayed: this call may change something, and the original session has no call of this tool "
    "with these arguments whose result could stand in for it. A replay never runs such a call."
)
NEW_QUESTION = "The user declined to answer: a replay puts no new question to anyone."
WAITED = "The wait completed at once: this is a replay."
# Who resolved a downstream question of a replay (the interrupt's resolved_by).
REPLAY_RESOLVER = "replay"
NEW_SERVER_QUESTION = "a replay puts no new question to anyone"

Key = tuple[str, str]


def call_key(name: str, arguments: dict[str, Any]) -> Key:
    """A call as a replay matches it: its tool and its arguments as canonical JSON."""
    return name, json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class ReplayBook:
    """The original session's final calls by key, and how many of each the replay has used."""

    recorded: dict[Key, list[ToolCallRecord]] = field(default_factory=dict)
    used: Counter[Key] = field(default_factory=Counter)

    @classmethod
    def of(cls, original: Iterable[ToolCallRecord], replayed: Iterable[ToolCallRecord]) -> ReplayBook:
        """From the original's calls (in their order) and the replay's calls stored so far."""
        book = cls()
        for call in original:
            if call.is_final and call.result is not None:
                book.recorded.setdefault(call_key(call.name, call.arguments), []).append(call)
        for call in replayed:
            # Every settled call counts (one that found no record had nothing left to use).
            if (call.result or {}).get(REPLAYED):
                book.used[call_key(call.name, call.arguments)] += 1
        return book

    def settle(self, name: str, arguments: dict[str, Any], *, runs: bool) -> SettledCall | None:
        """What the call gets instead of running (None: it runs for real). `runs`: its tool is
        configured as read and needs no approval."""
        if name in SESSION_ONLY or runs:
            return None
        if name == DURABLE_WAIT:
            return SettledCall(
                status="succeeded", result={"text": WAITED, "is_error": False, REPLAYED: True}, why=REPLAYED
            )
        key = call_key(name, arguments)
        recorded = self.recorded.get(key, [])
        if self.used[key] < len(recorded):
            original = recorded[self.used[key]]
            self.used[key] += 1
            result = {**(original.result or {}), REPLAYED: True}
            return SettledCall(status=original.status, result=result, why=REPLAYED)
        if name == ASK_USER:
            result = {"text": NEW_QUESTION, "is_error": False, "declined": True, REPLAYED: True}
            return SettledCall(status="succeeded", result=result, why=REPLAYED)
        return SettledCall(
            status="failed", result={"text": NOT_REPLAYED, "is_error": True, REPLAYED: True}, why=REPLAYED
        )


def _question_key(call: ToolCallRecord, interrupt: InterruptRecord) -> tuple[str, str, str]:
    return (*call_key(call.name, call.arguments), str(interrupt.payload.get("question", "")))


@dataclass(slots=True)
class ReplayAnswers:
    """How the original session resolved each question a downstream server asked, by the call's
    tool and arguments and the question's text, and how many of each the replay has used."""

    recorded: dict[tuple[str, str, str], list[dict[str, Any]]] = field(default_factory=dict)
    used: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    @classmethod
    def of(
        cls,
        original: tuple[Iterable[ToolCallRecord], Iterable[InterruptRecord]],
        replayed: tuple[Iterable[ToolCallRecord], Iterable[InterruptRecord]],
    ) -> ReplayAnswers:
        """From the original's calls and interrupts, and the replay's so far (each a pair)."""
        answers = cls()
        for (calls, interrupts), record in ((original, True), (replayed, False)):
            by_id = {call.id: call for call in calls}
            for interrupt in interrupts:
                call = by_id.get(interrupt.tool_call_id) if interrupt.tool_call_id else None
                if call is None or interrupt.kind != "question" or not interrupt.payload.get("downstream"):
                    continue
                key = _question_key(call, interrupt)
                if record and interrupt.status in ("answered", "declined", "expired"):
                    answers.recorded.setdefault(key, []).append(interrupt.resolution or {})
                elif not record and interrupt.resolved_by == REPLAY_RESOLVER:
                    answers.used[key] += 1
        return answers

    def resolve(self, call: ToolCallRecord, interrupt: InterruptRecord) -> Resolution:
        """The original's resolution of this question (each used once), or a decline."""
        key = _question_key(call, interrupt)
        recorded = self.recorded.get(key, [])
        taken = self.used[key]
        self.used[key] += 1
        if taken < len(recorded):
            was = recorded[taken]
            answer = was.get("answer")
            return Resolution(
                answer=answer if isinstance(answer, str) else None,
                declined=bool(was.get("declined")),
                expired=bool(was.get("expired")),
                reason=was.get("reason") if isinstance(was.get("reason"), str) else None,
            )
        return Resolution(declined=True, reason=NEW_SERVER_QUESTION)
