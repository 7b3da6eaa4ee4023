"""Wake-ups between replicas on PostgreSQL: LISTEN/NOTIFY (the ChangeFeed port of
storage/wakeups.py; docs/design.md#wake-ups-between-processes).

Every write that changes a session queues `pg_notify(channel, payload)` with its other statements,
so PostgreSQL delivers it at COMMIT (and never for a transaction rolled back), with no extra round
trip. The payload is small: `<flags>/<origin>/<session id>`, flags `w` (the session needs a driver
and no live lease holds it) and `c` (a cancel was requested), `-` for neither; origin is the
writing process (empty for the command line), so a replica skips its own wakes (it signalled them
in-process already).

Each replica listens on one connection of its own, outside the pool (a pooled connection goes
back to the pool between statements, and a transaction-mode pooler such as PgBouncer's hands out a
different server connection for each transaction, which drops LISTEN: use `storage.listen_url`).
The listener pings its connection when nothing arrived for a while, so one that died without a
word is noticed; it reconnects with back-off, and after every gap tells the runtime to look at
everything once. Polling stays the safety net throughout.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import anyio
import psycopg
from anyio.abc import TaskStatus
from psycopg import AsyncConnection, sql

from parley.redaction import redact
from parley.storage.wakeups import WakeSink, parse_payload

logger = logging.getLogger(__name__)

# Channel names are identifiers: 63 bytes at most.
_MAX_CHANNEL = 63
# The first pause before listening again after a failure; it doubles up to the feed's `ping_s`.
FIRST_RETRY_S = 0.1


def channel_name(schema: str) -> str:
    """The channel of one schema's parley (deployments sharing a database in different schemas
    never wake each other)."""
    name = f"parley:{schema}"
    if len(name) <= _MAX_CHANNEL:
        return name
    return "parley:" + hashlib.sha256(schema.encode()).hexdigest()[:32]


class PostgresChangeFeed:
    """Other replicas' wakes, from LISTEN on a connection of its own (see the module docstring)."""

    def __init__(
        self,
        params: dict[str, Any],
        *,
        channel: str,
        origin: str,
        label: str,
        ping_s: float,
        secrets: Sequence[str | None] = (),
    ) -> None:
        self._params = params
        self._channel = channel
        self._origin = origin
        self._label = label
        # How long the connection may be silent before it is pinged, and the longest pause
        # between attempts to listen again.
        self._ping_s = ping_s
        self._secrets = tuple(secrets)

    async def run(self, sink: WakeSink, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        pause = FIRST_RETRY_S
        failing = False
        while True:
            try:
                conn = await AsyncConnection.connect(**self._params, autocommit=True)
                try:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    if failing:
                        logger.info("listening for other replicas' changes again on %s", self._label)
                    failing, pause = False, FIRST_RETRY_S
                    sink.feed_live(True)
                    if not started:
                        started = True
                        task_status.started()
                    await self._listen(conn, sink)
                finally:
                    # Shielded: when the store closes, this task is cancelled, and an unshielded
                    # close would be cancelled too, leaving the connection open (a ResourceWarning).
                    with anyio.CancelScope(shield=True):
                        await conn.close()
            except (psycopg.Error, OSError, TimeoutError) as exc:
                sink.feed_live(False)
                if not failing:
                    # Once per outage: the next line says when it works again.
                    logger.warning(
                        "cannot listen for other replicas' changes on %s (%s); polling meanwhile, retrying",
                        self._label,
                        _detail(exc, self._secrets),
                    )
                failing = True
            if not started:
                started = True
                task_status.started()
            await anyio.sleep(pause)
            pause = min(pause * 2, self._ping_s)

    async def _listen(self, conn: AsyncConnection[Any], sink: WakeSink) -> None:
        while True:
            heard = False
            async for note in conn.notifies(timeout=self._ping_s):
                heard = True
                self._deliver(note.payload, sink)
            if not heard:
                # Silent for a while: make sure the connection still answers (a peer that vanished
                # without closing the connection would otherwise leave this waiting for ever).
                with anyio.fail_after(self._ping_s):
                    await conn.execute("SELECT 1")

    def _deliver(self, payload: str, sink: WakeSink) -> None:
        parsed = parse_payload(payload)
        if parsed is None:
            return
        wake, origin = parsed
        if origin == self._origin:
            return  # this process signalled it in-process already
        sink.notify(wake.session_id)
        if wake.cancel:
            sink.request_cancel(wake.session_id)
        if wake.work:
            sink.work_available(wake.session_id)


def _detail(exc: BaseException, secrets: Sequence[str | None]) -> str:
    """The first line of a driver error, without a password it may repeat (postgres_plumbing's
    detail_of, which imports this module)."""
    text = str(exc).strip().splitlines()
    return redact(text[0] if text else type(exc).__name__, secrets)
