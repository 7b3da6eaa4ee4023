"""Wake-ups between processes on one SQLite file (the ChangeFeed port of storage/wakeups.py;
docs/design.md#wake-ups-between-processes).

A folder beside the database, `<database>-wake/` (0700, like the database's own folder), holds one
FIFO (0600) per serving process. After a commit that announces wakes, the store writes them, one
line each (`<flags>//<session id>`, wakeups.py's payload), to every other process's FIFO, without
blocking: a write of at most PIPE_BUF bytes is whole or not at all. Each serving process reads its
own FIFO on the event loop (no thread, nothing polled: idle costs nothing).

Robustness:
- a FIFO nobody reads any more (its process crashed) refuses the write (ENXIO, EPIPE): the writer
  removes it, and nobody else is slowed down;
- a FIFO is made under a hidden name and renamed once its reader is open, so a writer never takes
  a live process's FIFO for a dead one's;
- a reader far behind (its FIFO full, a write refused as EAGAIN) reads a large backlog next, and
  then looks at everything once instead of trusting the lines;
- a folder that is not this account's alone is not used (a warning, then polling alone).

Nothing listens on a network, and the folder is as private as the database. Polling at
`runtime.poll_interval_s` stays the safety net, as before: the feed never says it is live, so a
process of an older parley that announces nothing is still seen at the poll.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
from anyio.abc import TaskGroup, TaskStatus

from parley.core.ids import SessionId
from parley.storage.wakeups import Wake, WakeSink, parse_payload, wake_payload

logger = logging.getLogger(__name__)

FOLDER_SUFFIX = "-wake"
FOLDER_MODE = 0o700
FIFO_MODE = 0o600
# A write this long or shorter is whole or not at all (POSIX's least PIPE_BUF; Linux's is 4096).
ATOMIC_BYTES = 512
# A write is refused only when the FIFO holds nearly its capacity (all but less than a write), so
# a read of half the capacity or more may follow refused writes: look at everything then. The
# capacity is asked for where the system says it (Linux: 64 KiB, or 4 KiB for an account over its
# pipe quota); elsewhere 4 KiB is assumed, the least a pipe holds.
ASSUMED_CAPACITY = 4096
READ_BYTES = 65536
# The folder is listed again when it changed, and at least this often (a coarse mtime).
RELIST_S = 1.0
# A session another process says needs a driver is claimed here only this much later: that
# process signalled its own scheduler first and nearly always claims it within a millisecond or
# two, where its caller waits; taken here instead, the turn would run away from its caller.
WORK_GRACE_S = 0.05
_FIFO_NAME = re.compile(r"[0-9]+-[0-9a-f]{12}\.fifo")
_GONE = (errno.ENXIO, errno.EPIPE, errno.ENOENT, errno.ECONNREFUSED)


def wake_folder(database: Path) -> Path:
    return database.with_name(database.name + FOLDER_SUFFIX)


def _private(info: os.stat_result) -> bool:
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077


class WakeFolder:
    """The sending side, one per store: which other processes listen, and the lines written to
    them after a commit. Used by whoever holds the store's connection (one at a time)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._path = str(folder)
        # This process's own FIFO, while its feed runs (never written to).
        self.own: str | None = None
        self._peers: dict[str, int | None] = {}  # FIFO name -> write end, None until opened
        self._listed: tuple[int, float] | None = None  # (the folder's mtime, when listed)

    def listening(self) -> bool:
        """Whether another process listens (so the wakes of a commit are worth working out). One
        `stat` of the folder when nothing changed: this runs for every commit."""
        try:
            info = os.stat(self._path)
        except OSError:
            if self._peers:
                self.close()
            self._listed = None
            return False
        listed = self._listed
        if listed is None or listed[0] != info.st_mtime_ns or time.monotonic() - listed[1] >= RELIST_S:
            self._list(info)
        return any(name != self.own for name in self._peers)

    def send(self, wakes: Sequence[Wake]) -> None:
        """Write `wakes` to every other listening process; a process gone is forgotten."""
        if not wakes:
            return
        lines = [wake_payload(wake, "") + "\n" for wake in dict.fromkeys(wakes)]
        chunks = _chunks(lines)
        for name in list(self._peers):
            if name != self.own:
                self._send_to(name, chunks)

    def close(self) -> None:
        for fd in self._peers.values():
            if fd is not None:
                os.close(fd)
        self._peers.clear()

    def _send_to(self, name: str, chunks: list[bytes]) -> None:
        fd = self._peers.get(name)
        try:
            if fd is None:
                fd = os.open(self.folder / name, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                self._peers[name] = fd
            for chunk in chunks:
                os.write(fd, chunk)
        except BlockingIOError:
            pass  # its reader is far behind: it looks at everything when it reads the backlog
        except OSError as exc:
            self._forget(name)
            if exc.errno in _GONE:
                # Nobody reads it: its process ended without removing it.
                with contextlib.suppress(OSError):
                    (self.folder / name).unlink()
            else:
                logger.debug("cannot wake %s: %s", name, exc)

    def _forget(self, name: str) -> None:
        fd = self._peers.pop(name, None)
        if fd is not None:
            os.close(fd)

    def _list(self, info: os.stat_result) -> None:
        self._listed = (info.st_mtime_ns, time.monotonic())
        names: set[str] = set()
        if _private(info):
            with contextlib.suppress(OSError):
                names = {entry.name for entry in os.scandir(self._path) if _FIFO_NAME.fullmatch(entry.name)}
        for gone in set(self._peers) - names:
            self._forget(gone)
        for name in names:
            self._peers.setdefault(name, None)


def _chunks(lines: list[str]) -> list[bytes]:
    """The lines in writes of at most ATOMIC_BYTES, each ending at a line's end."""
    chunks: list[bytes] = []
    current = b""
    for line in lines:
        data = line.encode()
        if current and len(current) + len(data) > ATOMIC_BYTES:
            chunks.append(current)
            current = b""
        current += data
    if current:
        chunks.append(current)
    return chunks


class SqliteChangeFeed:
    """Other processes' wakes, read from this process's FIFO in the store's wake folder."""

    def __init__(self, folder: WakeFolder) -> None:
        self._folder = folder
        # How much a read must bring to mean that writes may have been refused (see above).
        self.backlog_bytes = ASSUMED_CAPACITY // 2

    async def run(self, sink: WakeSink, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        sink.feed_live(False)  # the plain poll stays the safety net (see the module docstring)
        try:
            name, read_fd, keep_fd = _make_fifo(self._folder.folder)
        except OSError as exc:
            logger.warning(
                "cannot listen for other processes' changes in %s (%s); polling alone",
                self._folder.folder,
                exc,
            )
            task_status.started()
            return
        self._folder.own = name
        self.backlog_bytes = _capacity(read_fd) // 2
        try:
            task_status.started()
            async with anyio.create_task_group() as later:
                await _read(read_fd, sink, self.backlog_bytes, later)
        finally:
            self._folder.own = None
            with contextlib.suppress(OSError):
                (self._folder.folder / name).unlink()
            os.close(read_fd)
            os.close(keep_fd)


def _make_fifo(folder: Path) -> tuple[str, int, int]:
    """A new FIFO of this process in `folder`: its name, its read end and a write end kept open (so
    the reader never sees an end of file when writers come and go)."""
    if not hasattr(os, "mkfifo"):
        raise OSError("this system has no FIFOs")
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=FOLDER_MODE)
    info = folder.stat()
    if not _private(info):
        raise PermissionError(
            f"the folder must be this account's alone (mode {stat.S_IMODE(info.st_mode):o})"
        )
    _sweep_hidden(folder)
    name = f"{os.getpid()}-{secrets.token_hex(6)}.fifo"
    hidden = folder / f".{name}"
    os.mkfifo(hidden, FIFO_MODE)
    try:
        read_fd = os.open(hidden, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        keep_fd = os.open(hidden, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        hidden.rename(folder / name)
    except BaseException:
        hidden.unlink(missing_ok=True)
        raise
    return name, read_fd, keep_fd


def _capacity(fd: int) -> int:
    get_size = getattr(fcntl, "F_GETPIPE_SZ", None)
    if get_size is None:
        return ASSUMED_CAPACITY
    try:
        return min(int(fcntl.fcntl(fd, get_size)), READ_BYTES)
    except OSError:
        return ASSUMED_CAPACITY


def _sweep_hidden(folder: Path) -> None:
    """Remove the hidden FIFOs of processes that died between making one and renaming it."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith(".") and _FIFO_NAME.fullmatch(entry.name[1:]):
                pid = int(entry.name[1:].partition("-")[0])
                if pid != os.getpid() and not _alive(pid):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, as another account's
    return True


async def _read(fd: int, sink: WakeSink, backlog_bytes: int, later: TaskGroup) -> None:
    rest = b""
    while True:
        await anyio.wait_readable(fd)
        try:
            data = os.read(fd, READ_BYTES)
        except BlockingIOError:
            continue
        if len(data) >= backlog_bytes:
            rest = b""
            sink.everything_changed()  # writes may have been refused meanwhile
            continue
        *lines, rest = (rest + data).split(b"\n")
        _deliver(lines, sink, later)


def _deliver(lines: list[bytes], sink: WakeSink, later: TaskGroup) -> None:
    """Each session once, however many lines name it (a burst of commits read together)."""
    wakes: dict[SessionId, tuple[bool, bool]] = {}
    for line in lines:
        parsed = parse_payload(line.decode(errors="replace"))
        if parsed is None:
            continue
        wake = parsed[0]
        work, cancel = wakes.get(wake.session_id, (False, False))
        wakes[wake.session_id] = (work or wake.work, cancel or wake.cancel)
    for session_id, (work, cancel) in wakes.items():
        sink.notify(session_id)
        if cancel:
            sink.request_cancel(session_id)
        if work:
            later.start_soon(_work_later, sink, session_id)


async def _work_later(sink: WakeSink, session_id: SessionId) -> None:
    await anyio.sleep(WORK_GRACE_S)
    sink.work_available(session_id)
