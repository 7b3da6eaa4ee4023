"""Titles, tags and retention without a process: the rules for a caller's title and tags, the
title proposed from a first message, list_sessions' narrowing arguments, the `retention:` block,
the retention sweep on a SQLite store, and a stream resumed after its events were removed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from parley.config import load_config
from parley.config.retention import RetentionConfig
from parley.core.records import SessionFilter
from parley.errors import InvalidArgument
from parley.runtime.retention import DAY_S, RetentionSweep
from parley.runtime.session_events import EventWatch, Reset, SessionEvents
from parley.runtime.session_labels import check_tags, check_title, proposed_title, session_filter
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from tests.support import open_test_store
from tests.test_config import only_error, project
from tests.test_storage_contract import T0, new_session

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("message", "title"),
    [
        (
            "Plan the trip to Lyon next spring with the kids please",
            "Plan the trip to Lyon next spring with …",
        ),
        ("  Taxes\n\t2026  ", "Taxes 2026"),
        ("x" * 100, "x" * 59 + "…"),
        ("hello\u200b", "hello"),
        ("\u200b \n", None),
        (None, None),
        ("/fail forever\nSummarise the report", "Summarise the report"),
        ('/tool shop__refund {"order": "A-17"}', None),
        ("/etc/hosts is wrong", "/etc/hosts is wrong"),
        ("hi, can you please help me plan a trip to Lyon?", "Plan a trip to Lyon"),
        ("Hello! Could you summarise this report for me. It is long.", "Summarise this report for me"),
        ("Why does nginx answer 502 for /api? It did not yesterday.", "Why does nginx answer 502 for /api?"),
        ("please fix the login page", "Fix the login page"),
        ("hello", "hello"),
        ("hello from the page", "hello from the page"),
        ("hey could you rename the file", "Rename the file"),
        ("Please.", "Please."),
        ("e.g. this one", "e.g. this one"),
    ],
)
def test_the_proposed_title_is_what_the_first_message_asks_for_in_its_first_words(
    message: str | None, title: str | None
) -> None:
    assert proposed_title(message) == title


def test_a_title_is_one_visible_line_of_at_most_200_characters_and_empty_clears_it() -> None:
    assert check_title("  Lyon trip ") == "Lyon trip"
    assert check_title("") is None and check_title("   ") is None
    for bad in ("a\nb", "\u200b\u200b", "x" * 201, "nul\x00"):
        with pytest.raises(InvalidArgument) as raised:
            check_title(bad)
        assert raised.value.field == "title"


def test_tags_are_short_words_without_spaces_at_most_20_duplicates_dropped() -> None:
    assert check_tags(["work", "project:alpha", "v1.2", "a/b", "work"]) == [
        "work",
        "project:alpha",
        "v1.2",
        "a/b",
    ]
    assert check_tags([]) == []
    for bad in (["two words"], [""], ["-lead"], ["x" * 41], [f"t{i}" for i in range(21)], ["é"]):
        with pytest.raises(InvalidArgument) as raised:
            check_tags(bad)
        assert raised.value.field == "tags"


def test_list_narrowing_reads_iso_dates_in_utc_and_refuses_what_it_cannot_read() -> None:
    assert session_filter(None, None, None, None) is None
    match = session_filter(" Lyon ", "work", "2026-11-30", "2026-12-01T00:00:00+01:00")
    start = datetime(2026, 11, 30, tzinfo=UTC).timestamp()
    end = datetime(2026, 11, 30, 23, tzinfo=UTC).timestamp()
    assert match == SessionFilter(title="Lyon", tag="work", created_from=start, created_before=end)
    for args, field in (
        (("", None, None, None), "title"),
        ((None, "a b", None, None), "tag"),
        ((None, None, "yesterday", None), "created_after"),
        ((None, None, "2026-12-02", "2026-12-01"), "created_before"),
    ):
        with pytest.raises(InvalidArgument) as raised:
            session_filter(*args)
        assert raised.value.field == field


def test_the_retention_block_is_validated_naming_the_field(tmp_path: Path) -> None:
    config = load_config(
        project(tmp_path, {"retention": {"events_after_days": 0.5, "interval_s": 0.1}}), None
    )
    assert config.retention.events_after_days == 0.5 and config.retention.enabled
    assert not load_config(project(tmp_path / "off", {}), None).retention.enabled
    for block, field in (
        ({"idle_sessions_after_days": 0}, "retention.idle_sessions_after_days"),
        ({"interval_s": 0.01}, "retention.interval_s"),
        ({"batch_size": 0}, "retention.batch_size"),
        ({"ended_after": 3}, "retention.ended_after"),
    ):
        error = only_error(project(tmp_path / field, {"retention": block}))
        assert error.field == field, str(error)


async def test_a_sweep_removes_in_batches_what_the_policy_no_longer_keeps_and_records_it(
    tmp_path: Path,
) -> None:
    now = T0 + 10 * DAY_S
    async with open_test_store(tmp_path / "parley.db") as store:
        steps = SessionSteps(store)
        old = [await new_session(store, now=T0) for _ in range(5)]
        for sid in old:
            await steps.request_close(sid, "alice", "done", T0)
        young = await new_session(store, now=now - 1)
        idle = await new_session(store, now=T0)
        config = RetentionConfig(ended_sessions_after_days=1, events_after_days=2, batch_size=2)
        report = await RetentionSweep(store, config, lambda: now).sweep()
        assert (report.sessions, report.batches) == (5, 3 + 1)
        # The idle session's one event (session_created) is past the events' age; it stays itself.
        assert report.events == 1 and await store.list_events(idle, 0, 100) == []
        for sid in old:
            assert await store.get_session(sid) is None
            assert [e.principal for e in await store.list_audit(sid, None, None, 5)] == ["retention"]
        assert await store.get_session(young) is not None and await store.get_session(idle) is not None
        assert await store.list_events(young, 0, 100) != []


async def test_a_stream_resumed_from_a_position_whose_later_events_are_all_gone_is_reset(
    tmp_path: Path,
) -> None:
    async with open_test_store(tmp_path / "parley.db") as store:
        sid = await new_session(store, now=T0)
        await store.record_event(sid, None, "note", {}, T0 + 1)
        latest = await store.latest_event_seq(sid)
        assert await store.purge_events(T0 + 5, 100) == latest
        signals = SessionSignals(0.05)
        events = SessionEvents(store, signals, EventWatch(store, signals, 0.05))
        with anyio.fail_after(5):
            async for item in events.follow(sid, 1, 0.05):
                assert item == Reset(latest_seq=latest, oldest_kept_seq=None)
                break
