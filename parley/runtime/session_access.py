"""Who reaches which session, applied to stored sessions: the rules of runtime/access.py with
the session and its agent looked up, refusals recorded in the audit, and the person a waiting
call may ask (elicitation, an input-required round, a task's input) when the agent takes that
person's decisions."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from parley.config import AgentConfig
from parley.core.ids import SessionId, is_session_id
from parley.core.records import InterruptRecord, PendingInterrupt, Resolution, SessionRecord
from parley.errors import ApproversOnly, HumanApprovalOnly, RequestError, SessionNotFound
from parley.runtime.access import DecisionPath, Principal, Verdict, decision_verdict, is_approver, may_see
from parley.runtime.audit import Audit
from parley.storage.ports import Store

# Puts an interrupt to a person through the client (elicitation); None when they dismissed it.
AskHuman = Callable[[InterruptRecord], Awaitable[Resolution | None]]


@dataclass(frozen=True, slots=True)
class Person:
    """The person behind a caller's client, whose answers decide the session's interrupts."""

    caller: Principal
    ask: AskHuman


@dataclass(frozen=True, slots=True)
class Decider:
    """Whether a caller may decide an interrupt with the tools (approve, answer_question) or
    /v1, and if not, who decides it (for a page that should not offer buttons that are refused)."""

    may_decide: bool
    decided_by: str | None = None


# How many sessions `visible(..., remembered=True)` keeps as last read (the least recently used go).
REMEMBERED_SESSIONS = 256


class SessionAccess:
    def __init__(self, store: Store, agents: Mapping[str, AgentConfig], audit: Audit) -> None:
        self._store = store
        self._agents = agents
        self._audit = audit
        self._remembered: OrderedDict[str, SessionRecord] = OrderedDict()

    async def visible(
        self,
        caller: Principal,
        session_id: str,
        act: str | None = None,
        targets: Sequence[str] = (),
        *,
        remembered: bool = False,
    ) -> SessionRecord:
        """The session, if `caller` owns it or has parley:admin; anything else is not found, the
        same answer as for an unknown id. With `act` (what the caller tried, an audit action) a
        refusal is recorded in the audit, once for each of `targets` (interrupts, a turn...).

        `remembered`: the session as this process last read it, if it did (else read and kept).
        Its id, owner, agent and kind never change, so the verdict is the same; the rest may be
        stale, and the caller's own transaction reads it again (a message's queueing does)."""
        session = self._remembered.get(session_id) if remembered else None
        if session is not None:
            self._remembered.move_to_end(session_id)
        else:
            session = await self._stored(session_id)
            if remembered and session is not None:
                self.remember(session)
        if session is None or not may_see(caller, session.owner):
            await self._not_found(caller, session_id, session, act, targets)
            raise SessionNotFound(session_id)
        return session

    def remember(self, session: SessionRecord) -> None:
        """Keep `session` for `visible(..., remembered=True)`, as a transaction just read it."""
        self._remembered[session.id] = session
        self._remembered.move_to_end(session.id)
        while len(self._remembered) > REMEMBERED_SESSIONS:
            self._remembered.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """The session is gone: a remembered copy must not answer for it."""
        self._remembered.pop(session_id, None)

    async def decidable(
        self, caller: Principal, session_id: str, act: str | None = None, targets: Sequence[str] = ()
    ) -> SessionRecord:
        """The session, if `caller` may see it or approves for its agent (then only its
        interrupts); anything else is not found (and recorded with `act`, as `visible` does)."""
        session = await self._stored(session_id)
        agent = self._agents.get(session.agent) if session is not None else None
        if session is None or not (may_see(caller, session.owner) or (agent and is_approver(caller, agent))):
            await self._not_found(caller, session_id, session, act, targets)
            raise SessionNotFound(session_id)
        return session

    async def refuse_unseen(self, caller: Principal, session_id: str, act: str) -> None:
        """Record `act` on a session `caller` was told is not found (see `visible`)."""
        await self._not_found(caller, session_id, await self._stored(session_id), act, ())

    async def _stored(self, session_id: str) -> SessionRecord | None:
        return await self._store.get_session(SessionId(session_id)) if is_session_id(session_id) else None

    async def _not_found(
        self,
        caller: Principal,
        session_id: str,
        session: SessionRecord | None,
        act: str | None,
        targets: Sequence[str],
    ) -> None:
        if act is None:
            return  # a read: not an act the trail records
        if not is_session_id(session_id):
            why = "not a session id"
        elif session is None:
            why = "no such session"
        else:
            why = f"a session of {session.owner}"
        await self._audit.not_found(caller, act, session_id, targets, why)

    def verdict(self, caller: Principal, session: SessionRecord, path: DecisionPath) -> Verdict:
        agent = self._agents.get(session.agent)
        if agent is None:
            # An agent no longer configured: its sessions' owners decide, as before.
            return "allowed" if may_see(caller, session.owner) else "not_found"
        return decision_verdict(caller, agent, session.owner, path)

    def may_ask_person(self, caller: Principal, session: SessionRecord) -> bool:
        """Whether what the person behind `caller`'s client answers decides this session's interrupts."""
        return self.verdict(caller, session, "person") == "allowed"

    async def may_answer_as_person(self, caller: Principal, session_id: str) -> bool:
        try:
            session = await self.decidable(caller, session_id)
        except SessionNotFound:
            return False
        return self.may_ask_person(caller, session)

    async def check_decider(
        self,
        caller: Principal,
        session: SessionRecord,
        path: DecisionPath,
        action: str,
        targets: Sequence[str],
    ) -> None:
        """Refuse (and record the attempt) unless `caller` may decide this session's interrupts by `path`."""
        verdict = self.verdict(caller, session, path)
        if verdict == "allowed":
            return
        error: RequestError
        if verdict == "human_only":
            error = HumanApprovalOnly(session.agent, session.id)
        elif verdict == "approvers_only":
            error = ApproversOnly(session.agent, session.id)
        else:
            await self._audit.not_found(caller, action, session.id, targets, f"a session of {session.owner}")
            raise SessionNotFound(session.id)
        for target in targets or [""]:
            await self._audit.refused(caller, action, session.id, target or None, str(error))
        raise error

    def person(self, caller: Principal, session: SessionRecord, ask_human: AskHuman | None) -> Person | None:
        """Whom a waiting call may ask about the session's interrupts: the person behind `caller`'s
        client, when the client can ask and the agent takes that person's decisions."""
        if ask_human is None or not self.may_ask_person(caller, session):
            return None
        return Person(caller, ask_human)

    async def person_for(
        self, caller: Principal, session_id: str, ask_human: AskHuman | None
    ) -> Person | None:
        """`person` by session id (an MCP task's `tasks/result` asks through its own request)."""
        if ask_human is None:
            return None
        try:
            session = await self.decidable(caller, session_id)
        except SessionNotFound:
            return None
        return self.person(caller, session, ask_human)

    async def list_pending(self, caller: Principal, limit: int) -> list[PendingInterrupt]:
        """The interrupts `caller` may see waiting: of its own sessions, and of every session of
        the agents it approves for (parley:admin: of every session)."""
        if caller.is_admin:
            return await self._store.list_pending_for(None, None, limit)
        approves = [a.name for a in self._agents.values() if is_approver(caller, a)]
        found = await self._store.list_pending_for(caller.id, approves, limit)
        return [
            p
            for p in found
            if p.owner == caller.id or self._verdict_for(caller, p.agent, p.owner) == "allowed"
        ]

    async def list_drafts(self, caller: Principal, limit: int) -> list[SessionRecord]:
        """The draft plans `caller` may approve, as list_pending finds interrupts."""
        if caller.is_admin:
            return await self._store.list_drafts_for(None, None, limit)
        approves = [a.name for a in self._agents.values() if is_approver(caller, a)]
        found = await self._store.list_drafts_for(caller.id, approves, limit)
        return [
            s
            for s in found
            if s.owner == caller.id or self._verdict_for(caller, s.agent, s.owner) == "allowed"
        ]

    def decider(self, caller: Principal, agent_name: str, owner: str) -> Decider:
        """Whether `caller` may decide the interrupts of `owner`'s session of agent `agent_name` by
        the tools or /v1, else who does."""
        agent = self._agents.get(agent_name)
        if agent is None:
            # An agent no longer configured: its sessions' owners decide, as `verdict` says.
            mine = may_see(caller, owner)
            return Decider(mine, None if mine else f"{owner}, whose session it is")
        verdict = decision_verdict(caller, agent, owner, "tool")
        if verdict == "allowed":
            return Decider(True)
        if verdict == "approvers_only" and agent.approvers is not None:
            scopes = [f"a caller with scope {s}" for s in agent.approvers.scopes]
            members = ", ".join(agent.approvers.principals + scopes)
            return Decider(False, f"the approvers of agent '{agent.name}': {members}")
        if verdict == "human_only":
            return Decider(
                False,
                f"a person, answering where their MCP client asks them (agent '{agent.name}' takes "
                "decisions only from a person), or an operator on the server (parley approve)",
            )
        return Decider(False, f"{owner}, whose session it is")

    def _verdict_for(self, caller: Principal, agent_name: str, owner: str) -> Verdict:
        agent = self._agents.get(agent_name)
        return decision_verdict(caller, agent, owner, "tool") if agent is not None else "not_found"
