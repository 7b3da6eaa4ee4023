"""`parley sessions list|update|delete` and `parley db vacuum`: finding, naming and removing
sessions from the command line (on the database directly, as an operator: any owner's session,
recorded in the audit as the `cli` principal with the OS account), and giving a SQLite file's
free pages back to the disk."""

from __future__ import annotations

import argparse
import getpass
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from parley.cli_common import load_from_args
from parley.config import ServerConfig
from parley.core.ids import SessionId, is_session_id
from parley.errors import RequestError
from parley.runtime import audit
from parley.runtime.access import cli_principal
from parley.runtime.audit import Audit
from parley.runtime.session_labels import check_tags, check_title, session_filter
from parley.runtime.session_steps import SessionSteps
from parley.storage.ports import Store

# How often a delete waiting for a running turn to stop looks again.
_DELETE_POLL_S = 0.1


def add_session_commands(ssub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The list filters and the update and delete actions of `parley sessions`."""
    lst = ssub.choices["list"]
    lst.add_argument("--status", help="only sessions with this status (idle, running, closed, ...)")
    lst.add_argument("--agent", help="only sessions of this agent")
    lst.add_argument("--title", help="only sessions whose title contains this text (any case)")
    lst.add_argument("--tag", help="only sessions carrying this tag")
    lst.add_argument("--created-after", help="only sessions created at or after this ISO 8601 date or time")
    lst.add_argument("--created-before", help="only sessions created before this ISO 8601 date or time")
    lst.add_argument("--cursor", help="the cursor the previous page printed")
    update = ssub.add_parser("update", help="set a session's title and/or tags")
    update.add_argument("session_id")
    update.add_argument("--title", help='the new title ("" removes it)')
    update.add_argument("--tags", nargs="*", help="the tags, replacing the session's (none: remove them)")
    delete = ssub.add_parser(
        "delete", help="delete a session and everything of it (a running one is closed first); audited"
    )
    delete.add_argument("session_id")
    delete.add_argument(
        "--wait", type=float, default=30.0, help="seconds to wait for a running turn to stop (default 30)"
    )


def add_vacuum_command(
    dsub: argparse._SubParsersAction[argparse.ArgumentParser], common: Callable[..., None]
) -> None:
    vacuum = dsub.add_parser(
        "vacuum", help="SQLite: give the free pages of deleted sessions and events back to the disk"
    )
    common(vacuum)
    vacuum.set_defaults(func=cmd_db_vacuum)


def _fail(message: str) -> int:
    print(f"parley: {message}", file=sys.stderr)
    return 1


async def list_sessions(store: Store, args: argparse.Namespace) -> int:
    match = session_filter(args.title, args.tag, args.created_after, args.created_before)
    page = await store.list_sessions(args.owner, args.status, args.agent, args.cursor, args.limit, match)
    if not page.sessions:
        print("no sessions")
    for s in page.sessions:
        created = time.strftime("%Y-%m-%d %H:%M", time.gmtime(s.created_at))
        tags = f"  [{', '.join(s.tags)}]" if s.tags else ""
        print(
            f"{s.id}  {created}Z  {s.agent:<12} {s.status:<10} turns={s.turn_count}  {s.title or '-'}{tags}"
        )
    if page.next_cursor:
        print(f"more: --cursor '{page.next_cursor}'")
    return 0


async def update_session(store: Store, args: argparse.Namespace) -> int:
    session = await store.get_session(SessionId(args.session_id)) if is_session_id(args.session_id) else None
    if session is None:
        return _fail(f"no session {args.session_id}")
    if args.title is None and args.tags is None:
        return _fail("give --title, --tags, or both; nothing was changed")
    title = check_title(args.title) if args.title is not None else session.title
    tags = check_tags(args.tags) if args.tags is not None else session.tags
    await store.set_labels(session.id, title, tags)
    await store.record_event(session.id, None, "session_updated", {"title": title, "tags": tags}, time.time())
    await Audit(store, time.time).record(
        cli_principal(getpass.getuser()), audit.UPDATE, session_id=session.id, via="cli"
    )
    print(f"{session.id}: title {title or '-'}, tags {', '.join(tags) or '-'}")
    return 0


async def delete_session(store: Store, args: argparse.Namespace) -> int:
    session = await store.get_session(SessionId(args.session_id)) if is_session_id(args.session_id) else None
    if session is None:
        return _fail(f"no session {args.session_id}")
    operator = cli_principal(getpass.getuser())
    trail = Audit(store, time.time)
    outcome = await store.delete_session(session.id, time.time())
    if outcome == "busy":
        # A turn runs (in a server): close the session, so its turn is cancelled and no queued
        # message starts another, then delete it once the server let it go.
        await SessionSteps(store).request_close(
            session.id, session.owner, "closed to be deleted", time.time()
        )
        await trail.record(operator, audit.CLOSE, session_id=session.id, via="cli", reason="delete_session")
        deadline = time.monotonic() + max(args.wait, 0.0)
        while True:
            outcome = await store.delete_session(session.id, time.time())
            if outcome != "busy" or time.monotonic() >= deadline:
                break
            await anyio.sleep(_DELETE_POLL_S)
    if outcome == "busy":
        return _fail(f"session {session.id} is still running a turn after {args.wait:g} s; try again later")
    if outcome == "deleted":
        await trail.record(
            operator, audit.DELETE, session_id=session.id, via="cli", owner=session.owner, agent=session.agent
        )
    print(f"{session.id}: deleted")
    return 0


async def run_session_action(store: Store, args: argparse.Namespace) -> int | None:
    """`parley sessions list|update|delete`; None for the actions cli.py handles itself."""
    actions = {"list": list_sessions, "update": update_session, "delete": delete_session}
    action = actions.get(args.action)
    if action is None:
        return None
    try:
        return await action(store, args)
    except RequestError as exc:
        return _fail(str(exc))


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def cmd_db_vacuum(args: argparse.Namespace) -> int:
    config: ServerConfig = load_from_args(args)
    if config.db_path is None:
        return _fail(
            "db vacuum is for SQLite files; PostgreSQL reclaims deleted rows itself (autovacuum), "
            "or run VACUUM in psql"
        )
    path = config.db_path
    if not path.exists():
        return _fail(f"no database file {path}")
    before = _size(path)
    try:
        # Waits for other processes' writes (a running server's) to pause, then rewrites the file.
        with sqlite3.connect(path, timeout=60.0, isolation_level=None) as db:
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as exc:
        return _fail(f"could not vacuum {path}: {exc}")
    after = _size(path)
    print(f"{path}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0
