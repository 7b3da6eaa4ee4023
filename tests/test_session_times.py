"""A session's creation time as list_sessions shows it and takes it back: shown to the millisecond,
never later than the time stored, so created_after=<a session's created_at> lists that session
and created_before=<it> does not, whatever the microseconds behind the millisecond shown."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest

from parley.runtime.session_labels import format_time, parse_time
from parley.testing import ManualClock, call, parley_app

pytestmark = pytest.mark.anyio

NEW_YEAR = datetime(2027, 1, 1, tzinfo=UTC).timestamp()
# Half a microsecond or less before a whole millisecond: rounded to the microsecond, as datetime
# does, such a time is the next millisecond already.
JUST_BEFORE = [
    math.nextafter(NEW_YEAR, 0),
    math.nextafter(NEW_YEAR + 0.124, 0),
    NEW_YEAR + 0.1239996,
    NEW_YEAR + 0.9999997,
]


def test_a_time_is_shown_as_the_millisecond_it_falls_in_never_the_next() -> None:
    assert format_time(NEW_YEAR) == "2027-01-01T00:00:00.000Z"
    assert format_time(math.nextafter(NEW_YEAR, 0)) == "2026-12-31T23:59:59.999Z"
    assert format_time(NEW_YEAR + 0.1239996) == "2027-01-01T00:00:00.123Z"
    rng = random.Random(7)
    times = JUST_BEFORE + [NEW_YEAR + rng.uniform(-3e8, 3e8) for _ in range(20_000)]
    for ts in times:
        shown = parse_time("created_after", format_time(ts))
        assert shown <= ts < shown + 0.001 + 1e-6, (repr(ts), format_time(ts))


async def test_a_creation_time_shown_is_a_bound_that_lists_its_session_after_and_not_before() -> None:
    clock = ManualClock(start=JUST_BEFORE[0])
    async with parley_app(clock=clock) as parley, parley.mcp() as client:
        made: list[tuple[str, str]] = []  # (session_id, created_at as shown), oldest first
        for n in range(5):
            started = await call(client, "start_session", agent="demo", message=f"session {n}")
            view = await call(client, "get_session", session_id=started["session_id"])
            made.append((started["session_id"], view["created_at"]))
            clock.advance(1)  # a whole second on: each session half a microsecond before a millisecond
        ids = [sid for sid, _ in made]

        async def listed(**window: str) -> list[str]:
            page = await call(client, "list_sessions", **window)
            return [s["session_id"] for s in page["sessions"]]

        assert await listed(created_after=made[1][1], created_before=made[4][1]) == [ids[3], ids[2], ids[1]]
        for sid, created in made:
            assert sid in await listed(created_after=created), created
            assert sid not in await listed(created_before=created), created
