"""A replay's rules: which calls of a replayed turn run for real, and what the others get.

A replay re-sends a session's messages to a new session (on another agent version, say). It
must never repeat a real-world write, so a call runs for real only when parley's configuration
classifies its tool as `read` (never on a server's own annotations), or when it changes nothing
but the replay session itself (write_todos, set_result). Any other call is settled as it is asked
for: with the recorded result of a call of the original session with the same tool and the same
arguments (compared as canonical JSON, each recorded result used at most once), or, without one,
with a clear "not replayed" result. A new question is declined; a durable wait completes at once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from parley.core.records import SettledCall, ToolCallRecord

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
