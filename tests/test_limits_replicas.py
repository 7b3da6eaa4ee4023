"""Fair-use limits behind several replicas: two parleys in this process (parley.testing, the
composition root of `parley serve`), each served over HTTP with static tokens, on one SQLite file
and on one PostgreSQL schema. One principal sending through both gets its limit once in total;
the refused call says which limit and when to retry, and stores nothing; another principal is
neither refused nor held up. Both replicas read one clock that the test moves (ManualClock)."""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from mcp import Client

from parley.testing import ManualClock, call, call_error, parley_app
from parley.testing.waiting import CALL_DEADLINE_S, DEADLINE_S
from tests.auth_support import token_client
from tests.support import Database, tokens_auth

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)]

NAMES = ("alice", "bob", "carol", "dave")
LIMITS = {
    "principals": {
        "alice": {"messages_per_minute": 3},
        "carol": {"sessions_per_minute": 4},
        "dave": {"running_turns": 1},
    }
}


@dataclass
class Replicas:
    urls: tuple[str, str]
    tokens: dict[str, str]
    clock: ManualClock
    database: Database

    def client(self, name: str, replica: int) -> Any:
        return token_client(self.urls[replica], self.tokens[name])


@asynccontextmanager
async def two_replicas(database: Database) -> AsyncIterator[Replicas]:
    tokens = {name: "parley_" + secrets.token_urlsafe(24) for name in NAMES}
    config = {"storage": database.storage(), "auth": tokens_auth(tokens), "limits": LIMITS}
    clock = ManualClock()
    async with AsyncExitStack() as stack:
        urls = []
        for _ in range(2):
            replica = await stack.enter_async_context(parley_app(config, db=database.db_arg, clock=clock))
            urls.append((await replica.http()).url)
        yield Replicas((urls[0], urls[1]), tokens, clock, database)


async def test_messages_per_minute_hold_in_total_across_replicas_and_say_when_to_retry(
    database: Database,
) -> None:
    async with two_replicas(database) as world:
        async with world.client("alice", 0) as a, world.client("alice", 1) as b:
            first = await call(a, "start_session", agent="demo", message="one")
            session = first["session_id"]
            assert (await call(b, "send_message", session_id=session, message="two"))["status"] == "answered"
            assert (await call(a, "send_message", session_id=session, message="three"))[
                "status"
            ] == "answered"
            refused = await call_error(b, "send_message", session_id=session, message="four")
            assert "limits.messages_per_minute = 3" in refused and "Try again in 60 s" in refused, refused
            world.clock.advance(20)
            refused = await call_error(a, "send_message", session_id=session, message="five")
            assert "Try again in 40 s; nothing was sent" in refused, refused
            async with world.client("bob", 0) as bob_a, world.client("bob", 1) as bob_b:
                other = await call(bob_b, "start_session", agent="demo", message="unaffected")
                for _ in range(3):
                    sent = await call(
                        bob_a, "send_message", session_id=other["session_id"], message="still fine"
                    )
                    assert sent["status"] == "answered"
            world.clock.advance(41)  # the first message is out of the minute
            assert (await call(b, "send_message", session_id=session, message="six"))["status"] == "answered"
            shown = str((await call(a, "get_session", session_id=session))["messages"])
        assert "four" not in shown and "five" not in shown and "six" in shown


async def test_two_replicas_never_both_admit_the_last_slot(database: Database) -> None:
    """Eight starts at once, four through each replica, against sessions_per_minute = 4."""
    async with two_replicas(database) as world:
        async with world.client("carol", 0) as a, world.client("carol", 1) as b:
            outcomes = await _at_once(
                [(a, b)[n % 2] for n in range(8)], {"message": "hello", "wait_seconds": 0}
            )
        refusals = [o for o in outcomes if o.startswith("refused")]
        assert len(refusals) == 4, outcomes
        assert all(
            "limits.sessions_per_minute = 4" in o and re.search(r"Try again in \d+ s", o) for o in refusals
        )
        stored = world.database.rows("SELECT count(*) FROM sessions WHERE owner = 'carol'")
        assert stored[0][0] == 4


async def test_running_turns_hold_across_replicas_and_a_busy_session_still_takes_messages(
    database: Database,
) -> None:
    """Four slow starts at once, two through each replica, against running_turns = 1."""
    async with two_replicas(database) as world, world.client("dave", 0) as a, world.client("dave", 1) as b:
        outcomes = await _at_once(
            [(a, b)[n % 2] for n in range(4)],
            {"message": f"/sleep {DEADLINE_S}\nslow", "wait_seconds": 0},
        )
        started = [o for o in outcomes if not o.startswith("refused")]
        assert len(started) == 1, outcomes
        for refused in (o for o in outcomes if o.startswith("refused")):
            assert (
                "limits.running_turns = 1" in refused and "Try again when one of them has answered" in refused
            )
        slow = started[0]
        queued = await call(b, "send_message", session_id=slow, message="after it", wait_seconds=0)
        assert queued["status"] == "running"
        async with world.client("bob", 1) as bob:
            assert (await call(bob, "start_session", agent="demo", message="fine"))["status"] == "answered"
        await call(a, "close_session", session_id=slow)


async def _at_once(clients: list[Client], arguments: dict[str, Any]) -> list[str]:
    """start_session through each of `clients` at the same moment: the new session's id, or
    "refused: <the error>", for each."""
    outcomes: list[str] = []

    async def start(client: Client) -> None:
        result = await client.call_tool("start_session", {"agent": "demo", **arguments})
        text = getattr(result.content[0], "text", "")
        if result.is_error:
            outcomes.append(f"refused: {text}")
        else:
            assert result.structured_content is not None
            outcomes.append(str(result.structured_content["session_id"]))

    with anyio.fail_after(CALL_DEADLINE_S):
        async with anyio.create_task_group() as group:
            for client in clients:
                group.start_soon(start, client)
    return outcomes
