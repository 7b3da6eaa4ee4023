"""The database on disk: private to its owner, and a path that cannot hold it is refused clearly."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from parley.errors import StorageError
from parley.ids import SessionId
from parley.storage.sqlite import open_sqlite_store

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
