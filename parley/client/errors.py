"""Every exception the client raises.

```
ClientError
├─ ConnectionFailed        the server could not be started or reached, or the connection broke and
│                          could not be made again within the client's reconnect time
├─ ProtocolError           the server answered a request with a JSON-RPC error (`code`, `message`)
└─ ToolError               a tool refused the call (an isError result); `text` is the server's message
   ├─ InvalidArgument       an argument is malformed or out of range (`field`)
   ├─ UnknownAgent          no agent of that name
   ├─ SessionNotFound       unknown or foreign session id
   ├─ SessionClosed         the session takes no more messages
   ├─ SessionLimitReached   the session used up a session-level limit
   ├─ InterruptNotFound     unknown interrupt id
   ├─ DecisionConflict      the interrupt was already resolved the other way
   ├─ NotYourDecision       the agent takes decisions only from a person, or only from its approvers
   ├─ SessionBusy           a running session cannot be deleted
   ├─ PlanRefused           execute_plan / discard_plan refused (`reason`: stale, already_approved,
   │                        no_plan, busy, turn_limit, no_draft); nothing changed
   ├─ RateLimited           over a fair-use limit (`retry_after_s` when the server said)
   └─ ServerFailure         the server failed (internal error, database unavailable); nothing changed
```

A tool refusal carries only text on the wire, so `tool_error` recognises the server's messages by
their fixed openings (parley/errors.py writes them); tests/test_client_contract.py builds each of the
server's errors and checks that it comes back as the class above, so the two cannot drift.
"""

from __future__ import annotations

import re


class ClientError(Exception):
    """Base of every error the parley client raises."""


class ConnectionFailed(ClientError):
    """The server could not be started or reached, or the connection broke and could not be made
    again in time. A call that was in flight may or may not have reached the server; calls that
    send messages carry a client_message_id, so repeating them never sends twice."""


class ProtocolError(ClientError):
    """The server answered with a JSON-RPC error instead of a result."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"MCP error {code}: {message}")


class ToolError(ClientError):
    """A tool refused the call; `text` is what the server said (it says what to do)."""

    def __init__(self, tool: str, text: str) -> None:
        self.tool = tool
        self.text = text
        super().__init__(text)


class InvalidArgument(ToolError):
    @property
    def field(self) -> str | None:
        found = re.match(r"Invalid argument '([^']*)'", self.text)
        return found.group(1) if found else None


class UnknownAgent(ToolError):
    pass


class SessionNotFound(ToolError):
    pass


class SessionClosed(ToolError):
    pass


class SessionLimitReached(ToolError):
    pass


class InterruptNotFound(ToolError):
    pass


class DecisionConflict(ToolError):
    pass


class NotYourDecision(ToolError):
    """The agent takes approvals and answers only from a person (`approver: human`) or from its
    `approvers:`; the text says who can decide and how."""


class SessionBusy(ToolError):
    pass


# What the server's refusal says, by the reason it names (parley/runtime/service/plans.py).
_PLAN_REASONS = {
    "was already approved": "already_approved",
    "the plan is at revision": "stale",
    "it has no plan to approve": "no_plan",
    "it is not waiting for a message": "busy",
    "it has used all the turns": "turn_limit",
    "it has no draft to discard": "no_draft",
}


class PlanRefused(ToolError):
    """execute_plan or discard_plan was refused and nothing changed: the plan moved on to another
    revision (`reason == "stale"`, `current_revision` names it: read it again and approve what you
    reviewed), there is no plan to approve or draft to discard, or the session is busy."""

    @property
    def reason(self) -> str | None:
        why = self.text.partition("refused: ")[2]
        for opening, reason in _PLAN_REASONS.items():
            if opening in why:
                return reason
        return None

    @property
    def current_revision(self) -> int | None:
        found = re.search(r"the plan is at revision (\d+), not", self.text)
        return int(found.group(1)) if found else None


class RateLimited(ToolError):
    @property
    def retry_after_s(self) -> float | None:
        found = re.search(r"Try again in (\d+(?:\.\d+)?) s", self.text)
        return float(found.group(1)) if found else None


class ServerFailure(ToolError):
    """The server could not do it (an internal error, or its database is full, read-only or
    unreachable); nothing was changed, and the same call may succeed later."""


# The openings of the server's messages (parley/errors.py, parley/server/turn_calls.py), first match wins.
_PATTERNS: list[tuple[re.Pattern[str], type[ToolError]]] = [
    (re.compile(r"^Invalid argument '"), InvalidArgument),
    (re.compile(r"^No agent named '"), UnknownAgent),
    (re.compile(r"^No session '"), SessionNotFound),
    (re.compile(r"^Session \S+ is closed \("), SessionClosed),
    (re.compile(r"^Session \S+ is running a turn \(or about to\)"), SessionBusy),
    (re.compile(r"^Session \S+: (execute_plan|discard_plan) refused: "), PlanRefused),
    (re.compile(r"^Session \S+: "), SessionLimitReached),
    (re.compile(r"^No interrupt '"), InterruptNotFound),
    (re.compile(r"^Interrupt \S+ was already resolved"), DecisionConflict),
    (
        re.compile(r"^Agent '[^']*' (accepts approvals and answers only from a person|takes approvals)"),
        NotYourDecision,
    ),
    (re.compile(r"limits\.(running_turns|sessions_per_minute|messages_per_minute) = "), RateLimited),
    (re.compile(r"^(parley hit an internal error|The database )"), ServerFailure),
]


def tool_error(tool: str, text: str) -> ToolError:
    """The typed error for a tool's refusal text."""
    for pattern, cls in _PATTERNS:
        if pattern.search(text):
            return cls(tool, text)
    return ToolError(tool, text)
