"""Schedules' rules: when a schedule ticks, which tick is due now, and what a due tick does under
the overlap and catch-up policies. Pure: the caller passes `now` (docs/schedules.md).

Ticks are absolute times every replica computes alike: an interval's ticks are the multiples of
it since the epoch, a cron expression's are the times it names in its time zone. So two replicas
that see the same schedule claim the same tick, and the database lets one of them have it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from parley.core.states import SESSION_AT_REST

Overlap = Literal["skip", "queue", "allow"]
CatchUp = Literal["skip", "once"]
# How a claimed tick went: a session started, none (overlap skip), or one waits for the previous run.
TickStatus = Literal["started", "skipped", "queued"]

# A tick is on time while it is at most this late; a later one was missed (the process was down
# or busy) and runs only under `catch_up: once`. Wider than a scheduler pass and a claim take.
ON_TIME_S = 3.0
# Schedule names: they become the tag `schedule:NAME` (at most 40 characters).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,30}")
NAME_RULE = "1 to 31 characters: ASCII letters and digits, then also _ or -"
_EVERY = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


class TimingError(ValueError):
    """A cron expression, time zone or interval that cannot be used; the text says the fix."""


def parse_every(text: str | float) -> float:
    """`every:` in seconds: a number, or a number with a unit (`30s`, `5m`, `1h`, `1d`)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _EVERY.fullmatch(str(text).strip())
        if match is None:
            raise TimingError(f"'{text}' is not an interval: write a number and a unit, e.g. 30s, 5m, 1h")
        seconds = float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    if not math.isfinite(seconds) or seconds <= 0:
        raise TimingError(f"'{text}' is not a positive interval")
    return seconds


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise TimingError(
            f"'{name}' is not a time zone this system knows: use an IANA name, e.g. UTC or Europe/Berlin"
        ) from exc


@dataclass(frozen=True, slots=True)
class Timing:
    """When a schedule ticks: every `every_s` seconds, or at the times `cron` names in `tz`."""

    every_s: float | None = None
    cron: str | None = None
    tz: str = "UTC"

    def __post_init__(self) -> None:
        if (self.every_s is None) == (self.cron is None):
            raise TimingError("give either cron (with timezone) or every, not both and not neither")
        if self.cron is not None:
            self._cron_from(0.0, reverse=False)

    def _cron_from(self, at: float, *, reverse: bool) -> CronSim:
        assert self.cron is not None
        start = datetime.fromtimestamp(at, tz=UTC).astimezone(zone(self.tz))
        try:
            return CronSim(self.cron, start, reverse=reverse)
        except CronSimError as exc:
            raise TimingError(
                f"'{self.cron}' is not a cron expression ({exc}): five fields, minute hour day month "
                "weekday, e.g. '0 8 * * 1-5' for weekdays at 08:00"
            ) from exc

    def latest_at_or_before(self, now: float) -> float | None:
        """The last tick at or before `now` (None: the cron expression names no earlier time)."""
        if self.every_s is not None:
            return float(math.floor(now / self.every_s) * self.every_s)
        # cronsim's reverse iteration starts before the given second: ask from just after now.
        try:
            return next(self._cron_from(math.floor(now) + 1, reverse=True)).timestamp()
        except StopIteration:
            return None

    def next_after(self, at: float) -> float | None:
        """The first tick after `at` (None: the cron expression names no later time)."""
        if self.every_s is not None:
            return float((math.floor(at / self.every_s) + 1) * self.every_s)
        try:
            return next(self._cron_from(math.floor(at), reverse=False)).timestamp()
        except StopIteration:
            return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """One schedule, from parley.yaml (`source="config"`) or made with the tools (`"database"`).
    Its sessions belong to `owner`; `message` (chat) or `inputs` (task) is what each one gets."""

    name: str
    timing: Timing
    agent: str
    owner: str
    message: str | None = None
    inputs: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()
    overlap: Overlap = "skip"
    catch_up: CatchUp = "skip"
    source: Literal["config", "database"] = "config"
    paused: bool = False
    created_by: str | None = None
    created_at: float | None = None

    @property
    def carries_owner_credentials(self) -> bool:
        """Whether its sessions may call downstream servers with the owner's own credentials: not
        when another principal (an admin) made it for the owner, who never agreed to that. One in
        parley.yaml is the operator's, who configures those credentials too."""
        return self.created_by is None or self.created_by == self.owner

    @property
    def session_tags(self) -> list[str]:
        """The tags of every session it starts: its own name first, so a filter finds them."""
        return list(dict.fromkeys([f"schedule:{self.name}", *self.tags]))


@dataclass(frozen=True, slots=True, kw_only=True)
class TickRecord:
    """A claimed tick: a row per (schedule, tick time), at most one ever."""

    schedule: str
    tick_at: float
    status: TickStatus
    session_id: str | None
    claimed_at: float


@dataclass(frozen=True, slots=True)
class TickClaim:
    """The tick a session start claims in its own transaction. `queued`: the claim takes a tick
    already held as `queued` (overlap queue) rather than a fresh one."""

    schedule: str
    tick_at: float
    queued: bool = False


@dataclass(frozen=True, slots=True)
class DueTick:
    """A tick to act on now, and whether it was missed (later than ON_TIME_S)."""

    tick_at: float
    missed: bool


def due_tick(timing: Timing, catch_up: CatchUp, last: float | None, now: float) -> DueTick | None:
    """The one tick to act on at `now`, after the last one claimed (`last`; None: none yet).

    Only the latest tick is ever due: ticks missed in between are never run one by one. A missed
    latest tick runs only under `catch_up: once`, so a downtime gives at most one session.
    """
    latest = timing.latest_at_or_before(now)
    if latest is None or (last is not None and latest <= last):
        return None
    missed = now - latest > ON_TIME_S
    if missed and (catch_up == "skip" or last is None):
        # A schedule never claimed has nothing to catch up on.
        return None
    return DueTick(latest, missed)


def previous_at_rest(status: str | None) -> bool:
    """Whether a schedule's previous session no longer runs (None: there is none)."""
    return status is None or status in SESSION_AT_REST


def overlap_outcome(overlap: Overlap, previous_status: str | None, queued_waiting: bool) -> TickStatus:
    """What a due tick does while the previous session is `previous_status`: start a session,
    skip the tick, or (overlap queue) wait for the previous run; at most one tick waits."""
    if overlap == "allow" or previous_at_rest(previous_status):
        return "started"
    if overlap == "queue" and not queued_waiting:
        return "queued"
    return "skipped"
