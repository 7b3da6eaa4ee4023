"""Who may do what: principals, scopes and the rules that decide access. Pure functions, no I/O.

A principal is whoever makes a call: over stdio and with `auth: none` the local user (`local`,
not authenticated: any local process could be it); with `auth: tokens` the configured name of
the bearer token; with `auth: oauth` the token's issuer and subject (`<iss>#<sub>`; an issuer
URL has no fragment, so the first `#` splits them). The OAuth client is recorded for the audit,
never used as the owner. Everything a call creates belongs to its principal.

| scope | grants |
|---|---|
| `parley:use` | start and talk to one's own sessions; decide their interrupts when the agent's approver policy allows the caller |
| `parley:admin` | everything `use` does, on every owner's sessions (read, message, decide, cancel, delete), as the CLI on the server does; and managing schedules |
| `parley:metrics` | the full `/healthz` report |

An agent may restrict who uses it (`users:`) and name who counts as a person for its interrupts
(`approvers:`), by principal or by scope. An approver sees and decides that agent's pending
interrupts whoever owns the session, and gains no other right on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Protocol

# The scopes and the local principal's name live in a leaf module that the configuration imports
# too; they are re-exported here, beside the rules that use them.
from parley.core.scopes import ADMIN as ADMIN
from parley.core.scopes import LOCAL as LOCAL
from parley.core.scopes import METRICS as METRICS
from parley.core.scopes import SCOPES as SCOPES
from parley.core.scopes import USE as USE


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """Who makes a call. `authenticated`: the identity comes from a verified credential (a
    configured token or an OAuth access token), not merely from being able to reach parley."""

    id: str
    scopes: frozenset[str] = frozenset()
    # For the audit: the OAuth client the token was issued to, else the MCP client's name.
    client: str | None = None
    authenticated: bool = False

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.scopes

    def has_any(self, scopes: frozenset[str] | set[str] | tuple[str, ...] | list[str]) -> bool:
        return any(s in self.scopes for s in scopes)

    def with_client(self, client: str | None) -> Principal:
        """This principal, naming `client` for the audit unless its token already named one."""
        return replace(self, client=client) if client and not self.client else self


# Every stdio caller, and every HTTP caller with `auth: none`.
LOCAL_PRINCIPAL = Principal(id=LOCAL, scopes=frozenset({USE}))


def cli_principal(os_user: str) -> Principal:
    """The operator at the server's command line: decides across owners (what `parley:admin`
    grants over HTTP); the audit names the account that ran the command."""
    return Principal(id="cli", scopes=frozenset({ADMIN}), client=f"os-user:{os_user}", authenticated=True)


def session_starter(os_user: str, auth_mode: str) -> Principal:
    """The operator at the command line starting sessions of its own (`parley eval`, `parley
    replay`). With `auth: none` the one person at the server is `local`: the sessions are theirs,
    so `/ui` and every local client list them. With sign-in they belong to `cli`, which admins see."""
    operator = cli_principal(os_user)
    if auth_mode != "none":
        return operator
    return Principal(id=LOCAL, scopes=frozenset({ADMIN, USE}), client=operator.client, authenticated=True)


class Members(Protocol):
    """A list of principals and scopes (an agent's `users:` or `approvers:`)."""

    @property
    def principals(self) -> list[str]: ...

    @property
    def scopes(self) -> list[str]: ...


class AgentAccess(Protocol):
    @property
    def users(self) -> Members | None: ...

    @property
    def approvers(self) -> Members | None: ...

    @property
    def approver(self) -> Literal["caller", "human"]: ...


def is_member(principal: Principal, members: Members) -> bool:
    return principal.id in members.principals or principal.has_any(members.scopes)


def may_see(principal: Principal, owner: str) -> bool:
    """Whether `principal` may read and drive a session (a task) that `owner` owns."""
    return principal.id == owner or principal.is_admin


def may_use(principal: Principal, agent: AgentAccess) -> bool:
    """Whether `principal` may start and talk to sessions of `agent` (`list_agents` shows only these)."""
    return agent.users is None or principal.is_admin or is_member(principal, agent.users)


def is_approver(principal: Principal, agent: AgentAccess) -> bool:
    """Whether `principal` counts as a person for `agent`'s interrupts by the agent's `approvers:`.
    Only an authenticated principal can be one: without authentication any local process could
    claim to be anybody."""
    return agent.approvers is not None and principal.authenticated and is_member(principal, agent.approvers)


# How a decision arrives: `tool` — the approve / answer_question tools (the calling client, maybe a
# model); `person` — what a person answered in the caller's client (elicitation, an MRTR round,
# a task's input).
DecisionPath = Literal["tool", "person"]

Verdict = Literal["allowed", "human_only", "approvers_only", "not_found"]


def decision_verdict(principal: Principal, agent: AgentAccess, owner: str, path: DecisionPath) -> Verdict:
    """May `principal` decide an interrupt of a session of `agent` owned by `owner`, by `path`?

    - `parley:admin` (like the operator at the CLI) always may;
    - an approver of the agent (authenticated, in `approvers:`) may, by any path, whoever owns
      the session;
    - with `approvers:` set, nobody else decides: an authenticated owner is refused whatever the
      path; an unauthenticated one (stdio, `auth: none`) only by a person's answer, as with
      `approver: human`;
    - otherwise the owner, by the agent's policy: `approver: caller` takes the tools and a
      person's answers, `approver: human` only a person's answers;
    - anyone else learns nothing about the session (`not_found`).
    """
    if principal.is_admin or is_approver(principal, agent):
        return "allowed"
    if principal.id != owner:
        return "not_found"
    if agent.approvers is not None and principal.authenticated:
        return "approvers_only"
    if agent.approver == "caller" and agent.approvers is None:
        return "allowed"
    return "allowed" if path == "person" else "human_only"
