"""The database on disk: private to its owner, and a path that cannot hold it is refused clearly."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from parley.core.ids import SessionId, new_tool_call_id
from parley.core.records import ModelStep, NewToolCall, lease_token
from parley.errors import StorageError
from parley.runtime.session_steps import SessionSteps
from parley.storage.sqlite import open_sqlite_store
from tests.test_storage_contract import PROC_A, T0, running_turn

pytestmark = pytest.mark.anyio


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_fresh_data_folder_is_0700_and_the_database_with_its_wal_and_shm_0600(tmp_path: Path) -> None:
    folder = tmp_path / "fresh" / "parley"
    db = folder / "parley.db"
    async with open_sqlite_store(db) as store:
        await store.get_session(SessionId("ses_" + "0" * 32))
        companions = [db.with_name("parley.db-wal"), db.with_name("parley.db-shm")]
        assert all(p.exists() for p in companions)
        assert _mode(folder) == 0o700
        assert {p.name: _mode(p) for p in (db, *companions)} == {
            "parley.db": 0o600,
            "parley.db-wal": 0o600,
            "parley.db-shm": 0o600,
        }


async def test_an_existing_database_readable_by_others_is_made_private_and_keeps_its_data(
    tmp_path: Path,
) -> None:
    db = tmp_path / "old.db"
    async with open_sqlite_store(db):
        pass
    os.chmod(db, 0o644)
    os.chmod(tmp_path, 0o755)
    async with open_sqlite_store(db) as store:
        assert await store.count_leases("nobody", 0.0) == 0
    assert _mode(db) == 0o600
    # A folder that already existed is the user's choice; only what parley creates is made private.
    assert _mode(tmp_path) == 0o755


@pytest.mark.parametrize("under", ["a-file", "a-file/deeper"])
async def test_a_database_path_under_a_regular_file_is_refused_naming_the_file_and_the_fix(
    tmp_path: Path, under: str
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(StorageError) as raised:
        async with open_sqlite_store(tmp_path / under / "parley.db"):
            pass
    message = str(raised.value)
    assert f"{tmp_path / 'a-file'} is a file, not a folder" in message
    assert "--db" in message and "\n" not in message


async def test_a_database_path_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="it is a folder; give the path of a file"):
        async with open_sqlite_store(tmp_path):
            pass


@pytest.mark.parametrize(
    ("effect", "synced"),
    [("non_idempotent_write", True), ("unclassified", True), ("read", False), ("idempotent_write", False)],
)
async def test_under_normal_sync_the_start_of_a_call_that_must_not_run_twice_is_synced_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, effect: str, synced: bool
) -> None:
    """storage.synchronous = normal leaves WAL commits to the OS, except the one that marks a call
    started that a power loss must never make look unsent: that one syncs the WAL file."""
    db = tmp_path / "parley.db"
    async with open_sqlite_store(db, synchronous="normal") as store:
        sid, turn = await running_turn(store)
        lease = lease_token(PROC_A, 1)
        steps = SessionSteps(store)
        call = NewToolCall(id=new_tool_call_id(), call_index=0, name="t", arguments={}, effect=effect)
        step = ModelStep(
            turn_id=turn.id,
            step_no=1,
            assistant={"text": ""},
            tool_calls=[call],
            input_tokens=1,
            output_tokens=1,
        )
        await steps.commit_model_step(sid, lease, step, T0 + 2)
        synced_files: list[str] = []
        real_fsync = os.fsync

        def recording_fsync(fd: int) -> None:
            synced_files.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", recording_fsync)
        await steps.mark_tool_call_started(sid, lease, call.id, T0 + 3)
        (started,) = await store.list_tool_calls(turn.id)
        assert started.status == "running"
    assert (f"{db}-wal" in synced_files) == synced


async def test_the_work_scan_never_reads_sessions_parked_on_a_person(tmp_path: Path) -> None:
    """10,000 sessions waiting for an approval cost the scan nothing: it reads two partial
    indexes that hold only sessions that may need a driver (migration 13)."""
    db = tmp_path / "parley.db"
    async with open_sqlite_store(db) as store:
        sid, _ = await running_turn(store)
        await store.release_lease(sid, lease_token(PROC_A, 1))
        with sqlite3.connect(db) as raw:
            raw.executemany(
                "INSERT INTO sessions (id, agent, owner, kind, status, created_at, updated_at) "
                "VALUES (?, 'demo', 'alice', 'chat', 'waiting_for_input', 1, 1)",
                [(f"ses_{i:032x}",) for i in range(10_000)],
            )
        assert await store.sessions_needing_work(T0 + 10, 100) == [sid]
    with sqlite3.connect(db) as raw:
        waiting = raw.execute(
            "SELECT COUNT(*) FROM sessions INDEXED BY sessions_waiting_work "
            "WHERE status = 'waiting_for_input' AND (wake_at IS NOT NULL OR lease_owner IS NOT NULL)"
        )
        assert waiting.fetchone() == (0,), "no parked session is in the scan's index"


async def test_every_folder_parley_creates_for_a_nested_data_path_is_0700_and_existing_ones_keep_their_mode(
    tmp_path: Path,
) -> None:
    os.chmod(tmp_path, 0o755)
    db = tmp_path / "a" / "b" / "c" / "parley.db"
    async with open_sqlite_store(db):
        pass
    created = [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"]
    assert {str(p.relative_to(tmp_path)): _mode(p) for p in created} == {
        "a": 0o700,
        "a/b": 0o700,
        "a/b/c": 0o700,
    }
    assert _mode(tmp_path) == 0o755
