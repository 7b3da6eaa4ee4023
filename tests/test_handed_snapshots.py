"""A change handed to the watches with the session as its own transaction read it back (Watch's
`seen`): the driver does so at a turn's start and end when someone in this process waits, and the
sender's wait then reads nothing more. What the sender gets must be what the database holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.core.changes import SessionSnapshot
from parley.core.ids import SessionId, TurnId
from parley.core.records import SessionRecord
from parley.runtime.service.outcomes import turn_outcome
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.server.wire import outcome_view
from parley.testing import call, parley_app
from tests.support import Database

pytestmark = pytest.mark.anyio

SID = SessionId("ses_" + "0" * 32)


def _seen(title: str) -> SessionSnapshot:
    return SessionSnapshot(
        session=SessionRecord.new(SID, agent="demo", owner="local", kind="chat", now=1.0, title=title),
        turn=None,
    )


async def test_a_watch_hands_over_the_last_change_once() -> None:
    signals = SessionSignals()
    first, second = _seen("first"), _seen("second")
    with signals.watching(SID) as watch, signals.watching(SID) as own:
        assert signals.watched(SID)
        signals.notify(SID, seen=first)
        signals.notify(SID, seen=second, but=own)
        assert await watch.wait(1.0)
        assert watch.take_seen() is second, "the last change's, not an earlier one"
        assert watch.take_seen() is None, "handed over once"
        assert own.take_seen() is first, "a watch the maker holds keeps what came before"
    assert not signals.watched(SID)


async def test_a_change_without_a_snapshot_or_a_wait_that_times_out_clears_it() -> None:
    signals = SessionSignals()
    with signals.watching(SID) as watch:
        signals.notify(SID, seen=_seen("handed"))
        signals.notify(SID)  # a change whose maker read nothing back: the handed one is stale
        assert await watch.wait(1.0)
        assert watch.take_seen() is None
        signals.notify(SID, seen=_seen("handed"))
        assert await watch.wait(1.0)
        assert not await watch.wait(0.01)
        assert watch.take_seen() is None, "only with the wake-up that brought it"
        signals.notify(SID, seen=_seen("handed"))
        signals.everything_changed()
        assert await watch.wait(1.0) and watch.take_seen() is None


# What a turn's outcome says, as a sender gets it and as turn_outcome reads it afterwards.
OUTCOME_FIELDS = ("turn_id", "status", "answer", "result", "error", "usage", "tool_calls", "pending")


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_what_a_sender_gets_is_the_turn_as_stored(tmp_path: Path, database: Database) -> None:
    config = {"storage": database.storage()}
    async with parley_app(config, db=database.db_arg, directory=tmp_path) as parley, parley.mcp() as client:
        store = parley.app.store
        answers = [await call(client, "start_session", agent="demo", message="one")]
        sid = SessionId(answers[0]["session_id"])
        for word in ("two", "three"):
            answers.append(await call(client, "send_message", session_id=sid, message=word))
        for answer in answers:
            turn = await store.get_turn(TurnId(answer["turn_id"]))
            assert turn is not None and turn.status == "answered"
            stored = outcome_view(await turn_outcome(SessionSteps(store), turn)).model_dump(mode="json")
            for field in OUTCOME_FIELDS:
                assert (answer.get(field) or None) == (stored.get(field) or None), field
            assert answer["session_status"] == "idle" and answer["answer"]
