"""The database file on disk: its folder and the file are created private to this account
(transcripts are nobody else's business), and a path that cannot hold a database is refused at
start-up with what to change."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from parley.errors import StorageError

logger = logging.getLogger(__name__)

FOLDER_MODE = 0o700
FILE_MODE = 0o600
# SQLite creates these beside the database with the database file's own permissions.
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")

_CHOOSE_ANOTHER = "choose another path with --db, PARLEY_DB or storage.path in parley.yaml"


def prepare_database_file(path: Path) -> None:
    """Make sure `path` can hold the database: create its folders (0700) and the file (0600) when
    missing, and take group and other permissions off an existing file of ours.

    Raises:
        StorageError: the path is unusable (a file where a folder must be, a folder where the
            file must be, no permission); the message names the path and the fix.
    """
    _make_folder(path)
    if path.is_dir():
        raise StorageError(f"cannot use {path} for the database: it is a folder; give the path of a file")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        _make_private(path)
    except OSError as exc:
        raise StorageError(f"cannot create the database {path}: {exc.strerror}; {_CHOOSE_ANOTHER}") from exc
    else:
        os.close(fd)
    for suffix in COMPANION_SUFFIXES:
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            _make_private(companion)


def _make_folder(path: Path) -> None:
    folder = path.parent
    if folder.is_dir():
        return
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise StorageError(
            f"cannot use {path} for the database: {blocker} is a file, not a folder; {_CHOOSE_ANOTHER}"
        )
    # Every folder created here is 0700, the missing parents too: a world-listable parent would
    # show who keeps a parley database where. Folders that already exist keep their mode.
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    for each in reversed(missing):
        try:
            each.mkdir(mode=FOLDER_MODE, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the folder {each} for the database: {exc.strerror}; {_CHOOSE_ANOTHER}"
            ) from exc


def _make_private(path: Path) -> None:
    """Existing files (from an older parley, or copied in) lose group and other access, when they
    are ours: a database readable by every local account exposes every transcript."""
    try:
        info = path.stat()
    except OSError:
        return
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.geteuid() or not mode & 0o077:
        return
    try:
        path.chmod(mode & 0o700)
    except OSError as exc:
        logger.warning(
            "%s is readable by other accounts (mode %o) and cannot be changed: %s", path, mode, exc
        )
        return
    logger.warning("%s was readable by other accounts; its mode is now %o (was %o)", path, mode & 0o700, mode)
