"""Every exception parley raises on purpose.

```
ParleyError
├─ RequestError            the caller can fix it; reaches the client as an isError tool result
│  ├─ InvalidArgument       a tool argument is malformed or out of range
│  ├─ UnknownAgent          no agent of that name is configured
│  ├─ SessionNotFound       unknown, malformed or foreign session id (one answer for all three)
│  ├─ SessionClosed         the session takes no more messages
│  ├─ AgentRemoved          the session's agent is no longer configured: it takes no more messages
│  ├─ SessionLimitReached   the session has used up a session-level limit
│  ├─ InterruptNotFound     unknown, malformed or foreign interrupt id
│  ├─ AttachmentNotFound    no attachment of that hash in the session
│  ├─ DecisionConflict      the interrupt was already resolved the other way
│  ├─ HumanApprovalOnly     the agent takes decisions only from a person
│  ├─ ApproversOnly         the agent takes decisions only from the principals it names
│  ├─ SessionBusy           a turn to delete did not stop within the wait
│  ├─ NotAdmin              the command needs the scope parley:admin
│  └─ RateLimited           the caller is over a fair-use limit; says when to try again
├─ ConfigError             a configuration file or field is wrong; names the file, field and fix
├─ ConfigErrors            every ConfigError found in one load
├─ ListenError             the HTTP server cannot listen on the address asked for
├─ StorageError            the database failed or is from a newer parley
│  ├─ StorageUnavailable    the database is full, read-only, locked, unreachable or failing; says which and the fix
│  └─ LeaseLost             another process took over the session; this one must stop driving it
├─ CredentialError         a stored credential does not decrypt (key not configured, or the row was altered)
└─ ModelError              a model call failed (a turn records it as its error)
```
"""

from __future__ import annotations

from typing import Literal


class ParleyError(Exception):
    """Base of every error parley raises deliberately."""


class RequestError(ParleyError):
    """The caller asked for something that cannot be done as asked; the message says how to fix it."""


class InvalidArgument(RequestError):
    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"Invalid argument '{field}': {problem}")


class NotAdmin(RequestError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} needs the scope parley:admin; ask an administrator. Nothing was changed.")


class UnknownAgent(RequestError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        names = ", ".join(sorted(known)) or "(none configured)"
        super().__init__(f"No agent named '{name}'. Known agents: {names}. Call list_agents to see them.")


class SessionNotFound(RequestError):
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"No session '{session_id}' was found for you. Session ids look like ses_ followed by "
            "32 hex digits; copy one from start_session or list_sessions."
        )


class SessionClosed(RequestError):
    def __init__(self, session_id: str, reason: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"Session {session_id} is closed ({reason}) and takes no more messages. "
            "Read it with get_session, or start a new one with start_session."
        )


class AgentRemoved(RequestError):
    def __init__(self, session_id: str, agent: str) -> None:
        self.session_id, self.agent = session_id, agent
        super().__init__(
            f"Session {session_id} takes no more messages: its agent '{agent}' is no longer configured on this "
            "server (its agent file was removed or renamed). The session stays readable with get_session; "
            "start a new session with an agent from list_agents. Nothing was sent."
        )


class SessionLimitReached(RequestError):
    def __init__(self, session_id: str, problem: str) -> None:
        self.session_id = session_id
        super().__init__(f"Session {session_id}: {problem} Start a new session with start_session.")


class OwnerOnly(RequestError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is for the session's owner only; sign in as them. Nothing was changed.")


class InterruptNotFound(RequestError):
    def __init__(self, session_id: str, interrupt_id: str) -> None:
        super().__init__(
            f"No interrupt '{interrupt_id}' in session {session_id}. Interrupt ids look like int_ followed "
            "by 32 hex digits; get_session lists the pending ones under 'pending'."
        )


class AttachmentNotFound(RequestError):
    def __init__(self, session_id: str, sha256: str) -> None:
        super().__init__(
            f"No attachment '{sha256[:80]}' in session {session_id}. Attachments are named by the sha256 "
            "(64 hex digits) get_session shows in a message's attachments."
        )


class DecisionConflict(RequestError):
    def __init__(self, interrupt_id: str, how: str) -> None:
        super().__init__(
            f"Interrupt {interrupt_id} was already resolved: {how}. The first decision stands; nothing was changed."
        )


class PlanRefused(RequestError):
    """execute_plan or discard_plan refused (a stale revision, a busy session, no draft): nothing
    was changed. `reason` is the outcome's name (stale, busy, no_plan, no_draft, turn_limit)."""

    def __init__(self, session_id: str, reason: str, why: str, revision: int | None = None) -> None:
        self.reason = reason
        self.revision = revision  # the plan's revision now
        super().__init__(f"Session {session_id}: {why} Nothing was changed.")


class HumanApprovalOnly(RequestError):
    def __init__(self, agent: str, session_id: str) -> None:
        super().__init__(
            f"Agent '{agent}' accepts approvals and answers only from a person (approver: human), not from "
            "the calling client. A person can answer the prompt their MCP client shows (elicitation), or an "
            f"operator can run 'parley pending' and 'parley approve {session_id} INTERRUPT_ID' on the server."
        )


class ApproversOnly(RequestError):
    def __init__(self, agent: str, session_id: str) -> None:
        super().__init__(
            f"Agent '{agent}' takes approvals and answers only from its approvers (approvers: in its file), and "
            f"you are not one of them. One of them decides session {session_id}'s pending interrupts (they "
            "see them with list_pending); nothing was changed."
        )


class SessionBusy(RequestError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"Session {session_id} is running a turn (or about to) that did not stop within the wait: the "
            "session is closed and its turn is being cancelled; call delete_session again in a moment. "
            "Nothing was deleted."
        )


class RateLimited(RequestError):
    """Over a fair-use limit (`limits:` in parley.yaml); the message says when to try again."""

    def __init__(self, message: str, retry_after_s: float | None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class ConfigError(ParleyError):
    """A configuration problem, with a stable code, the file, the field and the fix."""

    def __init__(self, code: str, file: str, field: str, problem: str) -> None:
        self.code, self.file, self.field, self.problem = code, file, field, problem
        super().__init__(f"{code} {file}: {field}: {problem}")


class ConfigErrors(ParleyError):
    """All problems of one configuration, so a user fixes them in one go."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


class ListenError(ParleyError):
    """`parley serve --http` cannot listen where asked (port in use, address not on this machine).

    Raised before anything starts; the message names the address and how to choose another."""

    def __init__(self, host: str, port: int, problem: str) -> None:
        self.host, self.port = host, port
        super().__init__(problem)


class StorageError(ParleyError):
    """The database failed, or holds a schema this parley does not know."""


StorageCondition = Literal["full", "read_only", "busy", "unreachable", "error"]

# What each condition means for the file, and what the operator does about it.
_STORAGE_PROBLEMS: dict[StorageCondition, str] = {
    "full": "is full: free space on its disk (or raise storage.max_size_mb)",
    "read_only": (
        "is not writable (a read-only file, folder or disk, or the file was moved away): "
        "fix its permissions or put it back"
    ),
    "busy": "is locked by another program: end that program's transaction",
    # A database server (PostgreSQL) that does not answer.
    "unreachable": "cannot be reached: check that the database server runs and accepts connections",
    "error": "failed",
}


class StorageUnavailable(StorageError):
    """A write (or read) failed because of the database file's condition, not the request.

    SQLite has already undone the transaction, so nothing was stored; the same call succeeds
    once the condition clears, without a restart."""

    def __init__(self, path: str, condition: StorageCondition, detail: str) -> None:
        self.path, self.condition, self.detail = path, condition, detail
        problem = _STORAGE_PROBLEMS[condition]
        if condition == "error":
            problem = f"failed ({detail}): check its disk and the file"
        # Without the retry advice, for messages at start-up.
        self.problem = f"the database {path} {problem}"
        super().__init__(f"The database {path} {problem}, then call again; nothing was changed.")


class LeaseLost(StorageError):
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} is now driven by another process")


class CredentialError(ParleyError):
    """A stored credential cannot be opened: the key that encrypted it is not configured, or its
    ciphertext was altered or copied from another row. The message names the credential and the
    key id, never a token or a key."""


class OAuthClientError(ParleyError):
    """parley as an OAuth client of a downstream server failed: discovery, registration, or the
    token endpoint refused or answered badly. The message names what and where, never a token."""


class ModelError(ParleyError):
    """A model call failed; the turn that made it records the message.

    `transient` failures (rate limits, overload, timeouts, broken streams) are retried as
    attempts of the same step; others (a bad key, a bad request) fail the turn at once."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        retry_after_s: float | None = None,
        context_length: bool = False,
    ) -> None:
        self.transient = transient
        self.retry_after_s = retry_after_s
        # The prompt was too long for the model: compaction can help.
        self.context_length = context_length
        super().__init__(message)
