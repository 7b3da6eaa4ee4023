"""One round trip of the store's statements on a pooled PostgreSQL connection, below psycopg's
cursors: each statement is sent with libpq's extended protocol in pipeline mode, then a Sync, and
every result is read back in the same wait.

Why not `conn.pipeline()` and a cursor per statement: that path costs about 50 µs of Python a
statement (a cursor, its adapters, the query's parsing, the prepared-statement bookkeeping),
and a turn sends about fifty. Here a statement costs its parameters' dumping and its rows'
loading, with psycopg's own Transformer (so types travel exactly as a cursor sends and reads
them), and psycopg's own generators do the I/O; the wait for the answer is this module's
(`_answers`: briefly blocked on the socket while the event loop has nothing else to run).

A statement sent a second time on a connection is prepared there (by its text and its
parameters' types), as psycopg does after five; at most PREPARED_PER_CONNECTION of them.

What a pipeline means is unchanged: its statements up to the Sync are one implicit transaction
unless it holds a BEGIN; the first failed statement's error is raised (a psycopg.Error, as from
a cursor) once every result up to the Sync is read, so the connection is ready for the next
(its caller rolls back a BEGIN it left open, as the pool's hand-back does).
"""

from __future__ import annotations

import asyncio
import select
from collections import deque
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from time import monotonic
from typing import Any
from weakref import WeakKeyDictionary

import anyio
import anyio.lowlevel
import psycopg
from psycopg import errors, pq
from psycopg.abc import PQGen
from psycopg.adapt import PyFormat, Transformer
from psycopg.generators import fetch_many, pipeline_communicate
from psycopg.waiting import Ready, Wait, wait_async

from parley.storage.postgres_plumbing import Conn
from parley.storage.sql.program import Result, Stmt

PREPARED_PER_CONNECTION = 256
# How long a cancelled round trip may take to stop the server's work and read its answers.
CANCEL_DRAIN_S = 5.0
# Statement texts seen once, remembered until this many (then forgotten, to start again).
SEEN_PER_CONNECTION = 2048
# Waiting for the server's answer. While the event loop has nothing else ready to run, the wait
# first blocks its thread on the socket for at most BLOCK_S: most answers come that soon, and a
# thread blocked in select() wakes sooner and at less cost than an event loop that sleeps (or
# spins: what it did before, the CPU the database server needed included). Then, or at once when
# other tasks are ready, it waits in the event loop, waking every WAIT_INTERVAL_S without an
# answer (psycopg's wait_async defaults to 0 there: a timer due at once, so the event loop spun,
# a full core, for as long as the server worked, a lock wait included).
BLOCK_S = 0.0003
WAIT_INTERVAL_S = 0.1
# select() takes descriptors below this only; a higher one goes straight to the event loop's wait.
_SELECTABLE = 1024
# The longest the event loop runs round trips answered at once without letting other tasks run.
MAX_BUSY_S = 0.005

_SYNC = pq.ExecStatus.PIPELINE_SYNC
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_FAILED = (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.PIPELINE_ABORTED)
_TEXT = pq.Format.TEXT

Key = tuple[bytes, tuple[int, ...]]


@lru_cache(maxsize=2048)
def numbered(sql: str) -> bytes:
    """The store's `?` placeholders as PostgreSQL's `$1, $2, ...` (no driver rewrites it here)."""
    first, *rest = sql.split("?")
    return (first + "".join(f"${n}{part}" for n, part in enumerate(rest, 1))).encode()


class _OnConnection:
    """What one connection keeps between round trips: its Transformer and prepared statements."""

    def __init__(self, conn: Conn) -> None:
        self.transformer = Transformer(conn)
        self.prepared: dict[Key, bytes] = {}
        self.seen: set[Key] = set()
        self._named = 0  # names given out, some perhaps in a pipeline that failed: never reused

    def name_to_prepare(self, key: Key) -> bytes | None:
        """A name for a statement to prepare now (seen before, and room left), else None."""
        if key not in self.seen:
            if len(self.seen) >= SEEN_PER_CONNECTION:
                self.seen.clear()
            self.seen.add(key)
            return None
        if len(self.prepared) >= PREPARED_PER_CONNECTION:
            return None
        self._named += 1
        return f"parley_{self._named}".encode()

    def forget(self, prepares: Sequence[tuple[Key, bytes]]) -> None:
        """Prepares that failed or whose answer never came: their names are not used again (one
        may exist on the server after all, unused)."""
        for key, name in prepares:
            if self.prepared.get(key) == name:
                del self.prepared[key]


_connections: WeakKeyDictionary[Conn, _OnConnection] = WeakKeyDictionary()


def _on(conn: Conn) -> _OnConnection:
    state = _connections.get(conn)
    if state is None:
        state = _connections[conn] = _OnConnection(conn)
    return state


class _Sent:
    """What the pipeline's commands answer, in order: each statement's executions and the
    prepares sent ahead of some of them."""

    def __init__(self) -> None:
        self.commands: deque[Callable[[], Any]] = deque()
        # Per command: the index of its statement, or the key and name of a prepare.
        self.answers: list[int | tuple[Key, bytes]] = []


def _queue(conn: Conn, state: _OnConnection, statements: Sequence[Stmt]) -> _Sent:
    pgconn = conn.pgconn
    tx = state.transformer
    sent = _Sent()
    for index, statement in enumerate(statements):
        query = numbered(statement.sql)
        for params in statement.many if statement.many is not None else (statement.params,):
            values = tx.dump_sequence(params, [PyFormat.AUTO] * len(params)) if params else None
            types = tuple(tx.types or ()) if params else ()
            formats = list(tx.formats or ()) if params else None
            key = (query, types)
            name = state.prepared.get(key)
            if name is None and (name := state.name_to_prepare(key)) is not None:
                # Taken as prepared from here on (a later use in this pipeline runs it); given
                # back if the prepare fails or its answer never comes (see round_trip).
                state.prepared[key] = name
                sent.commands.append(partial(pgconn.send_prepare, name, query, param_types=types))
                sent.answers.append((key, name))
            if name is not None:
                sent.commands.append(
                    partial(
                        pgconn.send_query_prepared, name, values, param_formats=formats, result_format=_TEXT
                    )
                )
            else:
                sent.commands.append(
                    partial(
                        pgconn.send_query_params,
                        query,
                        values,
                        param_types=types,
                        param_formats=formats,
                        result_format=_TEXT,
                    )
                )
            sent.answers.append(index)
    sent.commands.append(pgconn.pipeline_sync)
    return sent


def _exchange(pgconn: Any, commands: deque[Callable[[], Any]]) -> PQGen[list[list[Any]]]:
    """Send every command and read every result up to the Sync's (one generator, so that a
    cancelled round trip can go on reading it to its end: see _cancelled)."""
    fetched: list[list[Any]] = yield from pipeline_communicate(pgconn, commands)
    while not fetched or fetched[-1][0].status != _SYNC:
        more: list[Any] = yield from fetch_many(pgconn)
        if more:
            fetched.append(more)
    return fetched


async def round_trip(conn: Conn, statements: Sequence[Stmt]) -> list[Result]:
    """Every statement's rows and row count, in order, in one round trip."""
    state = _on(conn)
    sent = _queue(conn, state, statements)
    pgconn = conn.pgconn
    pgconn.enter_pipeline_mode()
    exchange = _exchange(pgconn, sent.commands)
    try:
        fetched = await _answers(exchange, pgconn.socket)
    except BaseException as exc:
        state.forget([answer for answer in sent.answers if isinstance(answer, tuple)])
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            await _cancelled(conn, exchange)
        raise
    finally:
        _leave_pipeline(pgconn)
    return _results(conn, state, sent, fetched, len(statements))


async def _answers(exchange: PQGen[list[list[Any]]], fileno: int) -> list[list[Any]]:
    """Run the exchange to its end: blocked on the socket for up to BLOCK_S while nothing else is
    ready to run, then asleep in the event loop (see BLOCK_S)."""
    global _last_yield
    try:
        wanted = next(exchange)
        until = monotonic() + BLOCK_S
        idle = _nothing_ready()
        while idle and fileno < _SELECTABLE and (left := until - monotonic()) > 0:
            if wanted & Wait.W:
                ready = _ready_now(fileno, wanted)
            else:
                ready = Ready.R if select.select([fileno], [], [], left)[0] else 0
            if not ready:
                break
            wanted = exchange.send(ready)
    except OSError as exc:  # as psycopg's wait reads it: the connection is gone
        raise psycopg.OperationalError("connection socket closed") from exc
    except StopIteration as done:
        fetched: list[list[Any]] = done.value
        if monotonic() - _last_yield >= MAX_BUSY_S:
            await anyio.lowlevel.checkpoint()  # other tasks' turn (psycopg's wait does the same)
            _last_yield = monotonic()
        return fetched
    fetched = await wait_async(_going_on(exchange, wanted), fileno, interval=WAIT_INTERVAL_S)
    _last_yield = monotonic()
    return fetched


_last_yield = monotonic()


def _nothing_ready() -> bool:
    """Whether the event loop has no callback ready to run but cancelled ones (from asyncio's
    queue of them, which is not public: without it, always False, so the wait never blocks)."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    return ready is not None and all(handle.cancelled() for handle in ready)


def _ready_now(fileno: int, wanted: Wait) -> int:
    """What the socket is ready for now, of what the exchange waits for (no waiting)."""
    poller = select.poll()
    poller.register(
        fileno, (select.POLLIN if wanted & Wait.R else 0) | (select.POLLOUT if wanted & Wait.W else 0)
    )
    ready = 0
    for _, events in poller.poll(0):
        if events & (select.POLLIN | select.POLLERR | select.POLLHUP):
            ready |= Ready.R
        if events & select.POLLOUT:
            ready |= Ready.W
    return ready


def _going_on(exchange: PQGen[list[list[Any]]], wanted: Wait) -> PQGen[list[list[Any]]]:
    """The exchange as psycopg's wait takes it, from the point it waits at."""
    while True:
        ready = yield wanted
        try:
            wanted = exchange.send(ready)
        except StopIteration as done:
            fetched: list[list[Any]] = done.value
            return fetched


async def _cancelled(conn: Conn, exchange: PQGen[list[list[Any]]]) -> None:
    """Cancelled while the server works (a decision waiting for a row lock): ask the server to
    stop, and read the pipeline to its Sync, so the connection goes back to the pool idle (rolled
    back by it if a BEGIN was sent). Shielded and bounded: if that fails, the connection is closed
    and the pool opens another."""
    drained = False
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_DRAIN_S):
        try:
            if not conn.closed:
                await conn.cancel_safe(timeout=CANCEL_DRAIN_S)
        except psycopg.Error:
            pass  # not delivered: the server may still end the work itself, within the bound
        try:
            await wait_async(exchange, conn.pgconn.socket, interval=WAIT_INTERVAL_S)
            drained = True
        except psycopg.Error:
            pass
    if not drained:
        conn.pgconn.finish()


def _leave_pipeline(pgconn: Any) -> None:
    if pgconn.status == pq.ConnStatus.BAD or pgconn.pipeline_status == pq.PipelineStatus.OFF:
        return
    try:
        pgconn.exit_pipeline_mode()
    except psycopg.OperationalError:
        # Still busy (interrupted half way): nothing more can be said on it, so it is closed, and
        # the pool opens another in its place.
        pgconn.finish()


def _results(
    conn: Conn, state: _OnConnection, sent: _Sent, fetched: list[list[Any]], count: int
) -> list[Result]:
    tx = state.transformer
    rows: list[list[Any]] = [[] for _ in range(count)]
    counts = [0] * count
    failure: psycopg.Error | None = None
    for answer, results in zip(sent.answers, fetched, strict=False):
        result = results[-1]
        if result.status in _FAILED:
            if isinstance(answer, tuple):
                state.forget([answer])
            failure = failure or _error(conn, result)
            continue
        if isinstance(answer, tuple):
            continue  # prepared, as it was taken to be
        if result.status == _TUPLES_OK:
            tx.set_pgresult(result)
            rows[answer] = tx.load_rows(0, result.ntuples, tuple)
            counts[answer] += result.ntuples
        else:
            counts[answer] += result.command_tuples or 0
    if failure is not None:
        raise failure
    return [Result(found, counted) for found, counted in zip(rows, counts, strict=True)]


def _error(conn: Conn, result: Any) -> psycopg.Error:
    if result.status == pq.ExecStatus.PIPELINE_ABORTED:
        return errors.PipelineAborted("pipeline aborted")
    return errors.error_from_result(result, encoding=conn.info.encoding)
