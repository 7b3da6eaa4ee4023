"""Fair use per principal (`limits:` in parley.yaml): how many of a principal's sessions may run
a turn at once, and how many sessions it may start and messages it may send per minute.

Everything is counted in the database, in the transaction that stores the session or the
message, under a lock of the principal (parley/storage/sql/usage.py): a refused call writes
nothing and counts toward nothing, and behind any number of replicas sharing the database a
principal gets its limit once, not once per replica. Over a limit the call is refused with when
to try again; other principals are not affected (their counts and locks are their own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from parley.config.auth import LimitsConfig
from parley.core.changes import Admission, Usage, UsageScope
from parley.errors import RateLimited
from parley.runtime.access import Principal

WINDOW_S = 60.0

# What is counted per minute: new sessions, messages.
Counted = Literal["sessions", "messages"]


@dataclass(frozen=True, slots=True)
class Claim:
    """What one call of a principal asks of its fair use: the minute's budgets it spends (what,
    limit) and the running turns it may add to, read (`scope`) and decided with its write."""

    who: str
    scope: UsageScope
    rates: tuple[tuple[Counted, int], ...]
    running_turns: int | None
    now: float

    def admit(self, usage: Usage, *, starts_turn: bool) -> list[Admission]:
        """The admissions to store with the call, given `usage` as committed; RateLimited (and
        nothing stored) if it would go over a limit. `starts_turn`: the call makes one more of
        the principal's sessions run a turn (a message to a busy session queues: it does not)."""
        now = self.now
        for what, limit in self.rates:
            sent = usage.counts.get(what, 0)
            if sent >= limit:
                wait_s = max(1, math.ceil(usage.oldest[what] + WINDOW_S - now))
                verb, nothing = (
                    ("started", "nothing was started") if what == "sessions" else ("sent", "nothing was sent")
                )
                raise RateLimited(
                    f"{self.who} has {verb} {sent} {what} in the last minute, the most this server allows "
                    f"(limits.{what}_per_minute = {limit}). Try again in {wait_s} s; {nothing}.",
                    retry_after_s=wait_s,
                )
        most = self.running_turns
        if starts_turn and most is not None and usage.running >= most:
            raise RateLimited(
                f"{self.who} has {usage.running} session(s) running a turn, the most this server allows at "
                f"once (limits.running_turns = {most}). Try again when one of them has answered (get_session "
                "with wait_seconds tells you when), or send this message to a session that is already "
                "running, where it queues.",
                retry_after_s=None,
            )
        return [Admission(self.who, what, self.scope.since) for what, _ in self.rates]


class FairUse:
    def __init__(self, limits: LimitsConfig) -> None:
        self._limits = limits

    def claim(self, who: Principal, *, new_session: bool, message: bool, now: float) -> Claim | None:
        """What a call of `who` that starts a session and/or sends a message must be admitted by,
        at `now` (wall-clock seconds, the same in every replica); None: no limit applies."""
        limits = self._limits.of(who.id)
        rates: list[tuple[Counted, int]] = []
        if new_session and limits.sessions_per_minute is not None:
            rates.append(("sessions", limits.sessions_per_minute))
        if message and limits.messages_per_minute is not None:
            rates.append(("messages", limits.messages_per_minute))
        running = limits.running_turns if message else None
        if not rates and running is None:
            return None
        scope = UsageScope(
            owner=who.id, since=now - WINDOW_S, admissions=bool(rates), running=running is not None
        )
        return Claim(who.id, scope, tuple(rates), running, now)
