"""fork_session: a new session of the caller's, made of a session it may read up to the end of
one of its turns (the rule is parley/core/forks.py's; the store reads the original and writes
the fork in one transaction). The original is never changed; the fork starts at rest."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from parley.core import forks
from parley.core.changes import Admit
from parley.core.forks import ForkSource
from parley.core.ids import new_session_id, new_turn_id
from parley.core.records import SessionRecord
from parley.errors import InvalidArgument, RateLimited, SessionNotFound
from parley.runtime import audit
from parley.runtime.access import Principal
from parley.runtime.fair_use import FairUse
from parley.runtime.service.checks import Checks
from parley.runtime.service.parts import Parts
from parley.runtime.session_labels import check_title
from parley.runtime.session_log import about

logger = logging.getLogger("parley.runtime.service")


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkRequest:
    """What fork_session asks for: the session, the turn whose end the fork starts from (0: before
    the first), the agent version its turns are pinned to (None: the live agent), its title."""

    session_id: str
    at_turn: int
    agent_version: str | None = None
    title: str | None = None


class ForkCommands:
    def __init__(self, parts: Parts, checks: Checks, fair_use: FairUse) -> None:
        self._parts = parts
        self._checks = checks
        self._fair_use = fair_use

    async def fork_session(self, caller: Principal, request: ForkRequest) -> SessionRecord:
        """Make the fork and return it (idle, turn_count = at_turn, its lineage set)."""
        p = self._parts
        at_turn = request.at_turn
        if isinstance(at_turn, bool) or not isinstance(at_turn, int) or at_turn < 0:
            raise InvalidArgument(
                "at_turn", "must be a turn's number (its seq, from 1), or 0 for none of them"
            )
        title = check_title(request.title) if request.title is not None else None
        original = await p.access.visible(caller, request.session_id, audit.FORK, [str(at_turn)])
        # The fork is the caller's: the caller must be allowed to use the agent itself.
        self._checks.agent(caller, original.agent)
        self._check_range(original, at_turn)
        pin = await self._checked_version(original, request.agent_version)
        now = p.clock()
        fork_id = new_session_id()
        ask = forks.ForkRequest(
            at_turn=at_turn,
            fork_id=fork_id,
            turn_ids=[new_turn_id() for _ in range(at_turn)],
            owner=caller.id,
            title=title if title is not None else original.title,
            agent_version_pin=pin,
            now=now,
        )
        claim = self._fair_use.claim(caller, new_session=True, message=False, now=now)
        admit = (
            None if claim is None else Admit(claim.scope, lambda usage: claim.admit(usage, starts_turn=False))
        )
        entry = p.audit.entry(
            caller,
            audit.FORK,
            session_id=fork_id,
            target=original.id,
            at_turn=at_turn,
            agent_version=pin,
        )

        def make(source: ForkSource | None) -> tuple[forks.ForkOutcome, forks.ForkedSession | None]:
            return forks.fork(source, ask)

        try:
            outcome, forked = await p.store.fork_session(original.id, at_turn, make, now, admit, entry)
        except RateLimited as exc:
            await p.audit.refused(caller, audit.FORK, original.id, str(at_turn), str(exc), reason="limit")
            raise
        if forked is None:
            raise await self._refusal(caller, original, at_turn, outcome)
        logger.info(
            "session %s forked from %s at turn %d", fork_id, original.id, at_turn, extra=about(forked.session)
        )
        p.signals.notify(fork_id)
        return forked.session

    def _check_range(self, original: SessionRecord, at_turn: int) -> None:
        if at_turn > original.turn_count:
            raise InvalidArgument("at_turn", _range(original, at_turn))

    async def _checked_version(self, original: SessionRecord, version: str | None) -> str | None:
        if version is None:
            return None
        if not isinstance(version, str) or not version.strip():
            raise InvalidArgument(
                "agent_version", "must be a version of the agent (leave it out for the live one)"
            )
        return await self._parts.agents.checked_version(original.agent, version, "agent_version")

    async def _refusal(
        self, caller: Principal, original: SessionRecord, at_turn: int, outcome: forks.ForkOutcome
    ) -> Exception:
        latest = await self._parts.store.get_session(original.id) or original
        error: Exception
        if outcome == "not_found":
            error = SessionNotFound(original.id)
        elif outcome == "running":
            error = InvalidArgument(
                "at_turn",
                f"turn {at_turn} of session {original.id} is still running; only an ended turn can be "
                f"forked from: wait for it to end, or give an earlier turn (0-{at_turn - 1}). Nothing was changed.",
            )
        else:
            error = InvalidArgument("at_turn", _range(latest, at_turn))
        await self._parts.audit.refused(
            caller, audit.FORK, original.id, str(at_turn), str(error), reason=outcome
        )
        return error


def _range(session: SessionRecord, at_turn: int) -> str:
    return (
        f"is {at_turn}, but session {session.id} has {session.turn_count} turn(s): give a turn from 0 "
        f"(before the first) to {session.turn_count}. Nothing was changed."
    )
