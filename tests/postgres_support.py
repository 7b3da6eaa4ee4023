"""PostgreSQL for the tests: the server named by PARLEY_TEST_POSTGRES, and schemas of our own in it.

Every schema a test run creates has a random name (runs on the same server never meet) and is
dropped when its tests end. Without a server the PostgreSQL tests skip, saying why, except on
CI (`CI=true`), where a missing server is a failure: there it must run.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import psycopg
import psycopg.conninfo
import pytest
from psycopg import sql

from parley.storage.postgres import database_label
from parley.storage.schema import DATA_TABLES, LATEST

POSTGRES_URL = os.environ.get("PARLEY_TEST_POSTGRES", "postgresql://root@127.0.0.1:5432/test")
# This test process's mark in schema names, and their count.
_RUN = secrets.token_hex(4)
_NUMBERS = itertools.count(1)
# How long a test waits for the server to accept a connection before calling it unreachable.
CONNECT_TIMEOUT_S = 3


def unreachable_reason() -> str | None:
    """Why the test server cannot be used, or None when it answers."""
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        detail = " ".join(line.strip() for line in str(exc).splitlines())
        return f"PostgreSQL at {POSTGRES_URL} (PARLEY_TEST_POSTGRES) is unreachable: {detail}"
    return None


def require_postgres() -> str:
    """The test server's URL; skips the test without a server (fails it on CI)."""
    reason = unreachable_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI runs the PostgreSQL tests, so the server must be up")
        pytest.skip(reason)
    return POSTGRES_URL


def new_schema_name(tag: str) -> str:
    """A schema name no other test, and no other run, uses."""
    return f"parley_t{_RUN}_{tag[:30]}_{next(_NUMBERS)}"


class PgSchema:
    """One schema of the test server: its name, and SQL straight on it (what an operator sees)."""

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.label = database_label(url, schema)
        # A statement here waits at most a minute for a lock a store holds: a test that blocks its
        # own event loop on it fails with a clear error instead of hanging.
        self._conn = psycopg.connect(url, autocommit=True, options="-c lock_timeout=60s")

    def rows(self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple[Any, ...]]:
        self._conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        cur = self._conn.execute(query.encode(), params)
        return list(cur.fetchall()) if cur.description is not None else []

    def exists(self) -> bool:
        return bool(self.rows("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)))

    def has_tables(self) -> bool:
        found = self.rows(
            "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'schema_version'", (self.schema,)
        )
        return bool(found)

    def reset(self) -> None:
        """Empty every table and forget schema versions this parley does not know, so a test
        finds the schema as a fresh, migrated database."""
        if not self.has_tables():
            return
        for table in reversed(DATA_TABLES):
            self.rows(f"DELETE FROM {table}")
        self.rows("DELETE FROM schema_version WHERE version > %s", (LATEST,))

    def restore(self, dump: Path) -> None:
        """Create the schema and run `dump` in it: plain SQL that names no schema (search_path
        says where it goes), as tests/upgrade/make_fixture.py writes."""
        self._conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
        self._conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        self._conn.execute(dump.read_text().encode())

    def drop(self) -> None:
        self._conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))

    def close(self) -> None:
        self._conn.close()


@contextmanager
def schema_for_test(url: str, tag: str) -> Iterator[PgSchema]:
    """A new schema name (the schema itself is made by the first store opened on it), dropped at the end."""
    schema = PgSchema(url, new_schema_name(tag))
    try:
        yield schema
    finally:
        schema.drop()
        schema.close()


class DatabaseProxy:
    """A TCP relay in front of the test server, so a test can take the database away from a store
    (or a `parley serve`) and give it back, without touching the server others use.

    `cut()` drops every relayed connection and stops listening: the database is unreachable.
    `restore()` listens again on the same port. Run it with `async with DatabaseProxy(url) as proxy`
    and give the store `proxy.url`.
    """

    def __init__(self, url: str) -> None:
        params = psycopg.conninfo.conninfo_to_dict(url)
        self._upstream = (str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
        self._url = url
        self.port = 0
        self._scope: anyio.CancelScope | None = None
        self._group: anyio.abc.TaskGroup | None = None

    @property
    def url(self) -> str:
        host, port = self._upstream
        return self._url.replace(f"{host}:{port}", f"127.0.0.1:{self.port}", 1)

    async def __aenter__(self) -> DatabaseProxy:
        self._group = await anyio.create_task_group().__aenter__()
        await self.restore()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)

    async def restore(self) -> None:
        assert self._group is not None
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self._scope = await self._group.start(self._serve, listener)

    async def cut(self) -> None:
        assert self._scope is not None
        self._scope.cancel()

    async def _serve(
        self,
        listener: anyio.abc.Listener[anyio.abc.SocketStream],
        *,
        task_status: anyio.abc.TaskStatus[anyio.CancelScope],
    ) -> None:
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            async with listener, anyio.create_task_group() as relays:
                await listener.serve(self._relay, relays)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp(*self._upstream) as server:

            async def pump(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
                with contextlib.suppress(
                    anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError
                ):
                    async for chunk in source:
                        await sink.send(chunk)
                # One side ended: end the other, so neither waits for more.
                relay.cancel_scope.cancel()

            async with anyio.create_task_group() as relay:
                relay.start_soon(pump, client, server)
                relay.start_soon(pump, server, client)


class PrivatePostgres:
    """A PostgreSQL server of the test's own (initdb into a temporary folder, a free port, its unix
    socket in that folder), so a test can stop and start the database under a running parley
    without touching the server others use. Run as `with PrivatePostgres() as pg:`; `pg.url`
    names it (user `parley`, trust authentication, loopback only).

    As root (initdb refuses to run as root) the server runs as the `postgres` system account."""

    def __init__(self) -> None:
        self.binaries = _postgres_binaries()
        self.port = 0
        self.directory = Path()
        self._as: list[str] = []

    @property
    def url(self) -> str:
        return f"postgresql://parley@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def __enter__(self) -> PrivatePostgres:
        self.directory = Path(tempfile.mkdtemp(prefix="parley-pg-"))
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.directory, account.pw_uid, account.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._run("initdb", "-D", str(self.data), "-U", "parley", "--auth=trust", "--no-sync", "-E", "UTF8")
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.directory / "log"), "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `fast` disconnects everyone and shuts down cleanly, `immediate` kills
        every server process at once (the next start recovers from the log, as after a crash)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def log(self) -> str:
        path = self.directory / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [*self._as, str(self.binaries / program), *args], check=True, capture_output=True, timeout=120
        )


def _postgres_binaries() -> Path:
    """The newest /usr/lib/postgresql/*/bin with initdb and pg_ctl; skips the test without one (fails
    it on CI)."""
    found = sorted(
        (
            p.parent
            for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")
            if (p.parent / "pg_ctl").exists()
        ),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if found and (os.geteuid() != 0 or shutil.which("runuser")):
        return found[-1]
    reason = "no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI runs the PostgreSQL restart test, so they must be installed")
    pytest.skip(reason)
