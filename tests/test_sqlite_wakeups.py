"""Wake-ups between processes on one SQLite file (storage/sqlite_wakeups.py): a process hears what
another commits, at once and not its own writes; a process that died without a word is forgotten
and slows nobody; a reader far behind looks at everything; the folder and its FIFOs are private.

Two stores opened on one path are two processes' view of the file: separate connections, and
nothing shared in this process between them, so what one hears of the other came through its
FIFO, as between processes. Every feed here waits with no poll at all. A real second process
reaching the first one's event stream with its poll set to a minute is
tests/test_e2e_event_stream.py."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from parley.storage.sqlite import SqliteStore
from parley.storage.sqlite_wakeups import wake_folder
from parley.testing import HeldModel, call, parley_app
from tests.support import TEST_DEADLINE_S, eventually, open_test_store
from tests.test_wakeups import Heard, _first_message, _true, hear_each_other

pytestmark = pytest.mark.anyio


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, SqliteStore]]:
    """Two stores on one file, as two processes open it."""
    async with open_test_store(tmp_path / "p.db") as a, open_test_store(tmp_path / "p.db") as b:
        assert isinstance(a, SqliteStore) and isinstance(b, SqliteStore)
        yield a, b


def _fifos(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".fifo"))


async def test_a_process_hears_what_another_commits_on_the_file_and_not_its_own_writes(
    processes: tuple[SqliteStore, SqliteStore],
) -> None:
    a, b = processes
    heard_by_a, heard_by_b = Heard(), Heard()
    async with anyio.create_task_group() as tg:
        await tg.start(a.feed.run, heard_by_a)
        await tg.start(b.feed.run, heard_by_b)
        # The plain poll stays the safety net: the feed never says every change arrives.
        assert heard_by_a.live == [False] and heard_by_b.live == [False]

        sid = await hear_each_other(a, b, heard_by_a, heard_by_b)
        tg.cancel_scope.cancel()
    assert heard_by_a.notified == [sid], "a heard only b's cancel, never its own writes"
    assert _fifos(wake_folder(a.path)) == [], "each process removes its FIFO as it stops"


async def test_a_process_that_died_without_a_word_is_forgotten_and_slows_nobody(
    processes: tuple[SqliteStore, SqliteStore],
) -> None:
    a, b = processes
    heard = Heard()
    folder = wake_folder(a.path)
    folder.mkdir(mode=0o700)
    # A process killed between making its FIFO and renaming it into place (no such pid) leaves it
    # hidden: the next process to start removes it.
    os.mkfifo(folder / ".4194305-0123456789ab.fifo", 0o600)
    async with anyio.create_task_group() as tg:
        await tg.start(b.feed.run, heard)
        assert not (folder / ".4194305-0123456789ab.fifo").exists()
        # What a SIGKILLed process leaves: its FIFO, which nobody reads.
        os.mkfifo(folder / "4242-0123456789ab.fifo", 0o600)
        assert len(_fifos(folder)) == 2
        sid = await _first_message(a)
        await eventually(lambda: _true(sid in heard.work), "b to hear of a's session")
        assert [p.name for p in _fifos(folder)] != ["4242-0123456789ab.fifo"] and len(_fifos(folder)) == 1
        # Private like the database: the folder 0700, the FIFO 0600.
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE(_fifos(folder)[0].stat().st_mode) == 0o600
        tg.cancel_scope.cancel()
    # b stops; a still holds b's FIFO open for writing: the next commit finds nobody reading.
    later = await _first_message(a)
    assert later and _fifos(folder) == []


async def test_a_reader_far_behind_looks_at_everything_once(
    processes: tuple[SqliteStore, SqliteStore],
) -> None:
    _, b = processes
    heard = Heard()
    async with anyio.create_task_group() as tg:
        await tg.start(b.feed.run, heard)
        # A backlog as large as one a full FIFO leaves (writes beyond it were refused).
        (fifo,) = _fifos(wake_folder(b.path))
        line = b"w//ses_" + b"0" * 32 + b"\n"
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, line * (b.feed.backlog_bytes // len(line) + 1))
        finally:
            os.close(fd)
        await eventually(lambda: _true(heard.everything > 0), "b to look at everything")
        tg.cancel_scope.cancel()


async def test_a_folder_other_accounts_can_enter_is_not_used(tmp_path: Path) -> None:
    folder = wake_folder(tmp_path / "p.db")
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    heard = Heard()
    async with open_test_store(tmp_path / "p.db") as store, anyio.create_task_group() as tg:
        assert isinstance(store, SqliteStore)
        await tg.start(store.feed.run, heard)
        assert _fifos(folder) == [] and heard.live == [False]
        await _first_message(store)  # commits as before, polling alone
        tg.cancel_scope.cancel()


async def test_a_cancel_through_one_process_stops_the_turn_the_other_drives_and_is_answered_at_once(
    tmp_path: Path,
) -> None:
    """Two apps on one file, over MCP. Nothing looks at the database by itself within the test's
    deadline (the poll once a minute, lease renewals every 100 s), so the cancel reaches the
    driving process, and the end of the turn the cancelling caller, only through the wake-ups."""
    model = HeldModel()
    hold = model.hold("slow")
    config = {"runtime": {"poll_interval_s": 60, "lease_ttl_s": 300}}
    db = tmp_path / "p.db"
    async with (
        parley_app(config, db=db, model=model) as one,
        parley_app(config, db=db, model=model) as two,
        one.mcp() as client_one,
        two.mcp() as client_two,
    ):
        sid = (await call(client_one, "start_session", agent="demo"))["session_id"]
        await call(client_one, "send_message", session_id=sid, message="slow", wait_seconds=0)
        await hold.wait_held(TEST_DEADLINE_S)
        with sqlite3.connect(db) as spy:
            (lease,) = spy.execute("SELECT lease_owner FROM sessions WHERE id = ?", (sid,)).fetchone()
        driver = one if lease.startswith(f"{one.app.process_id}#") else two
        assert lease.startswith(f"{driver.app.process_id}#")
        other = client_two if driver is one else client_one
        with anyio.fail_after(TEST_DEADLINE_S):
            outcome = await call(other, "cancel_turn", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        assert outcome["status"] == "cancelled", outcome
