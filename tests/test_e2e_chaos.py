"""Chaos: three `parley serve --http` replicas on one database (a PostgreSQL schema, or one SQLite
file) while a client drives 100+ sessions through random replicas (text turns, a `read` tool, a
`non_idempotent_write` tool, approvals, durable waits) and replicas are SIGKILLed and restarted at
random. At the end every accepted message has exactly one answer, no write ran twice, every turn has
ended, and no session is left leased.

Bounded: the chaos lasts PARLEY_CHAOS_SECONDS (default 15; the whole test stays under half a minute
a database on CI), with PARLEY_CHAOS_SESSIONS sessions (default 60); raise both for a longer run. The random
seed is printed and PARLEY_CHAOS_SEED replays a run's choices (not its timing).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from parley.tls import http_client
from tests.conftest import database_for
from tests.support import (
    CALL_DEADLINE_S,
    FIXTURE_LOG,
    TEST_DEADLINE_S,
    Database,
    ServerProcess,
    fixture_calls,
    fixture_server,
    write_config,
)

pytestmark = pytest.mark.anyio

CHAOS_S = float(os.environ.get("PARLEY_CHAOS_SECONDS", "15"))
SESSIONS = int(os.environ.get("PARLEY_CHAOS_SESSIONS", "60"))
REPLICAS = 3
# How long a call waits for its turn on the server (a kill ends it sooner; the client then asks
# another replica for the same message).
WAIT_S = 10.0
RUNTIME = {
    "poll_interval_s": 0.1,
    "lease_ttl_s": 1.0,
    "default_wait_s": WAIT_S,
    "max_wait_s": WAIT_S,
    "shutdown_grace_s": 1.0,
    "progress_interval_s": 5.0,
    # One replica may have to take over every session while the other two restart.
    "max_driven_sessions": 200,
}
AGENTS: dict[str, dict[str, Any]] = {
    # Writes without approval: a kill during one must never make it run twice.
    "worker": {
        "mcp_servers": [{"server": "fixture", "tools": {"append_note": {"approval": "never"}}}],
        "tools": ["durable_wait"],
    },
    # Writes only once a person approved (through whichever replica).
    "careful": {"mcp_servers": ["fixture"]},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    """The replicas: each keeps its port across restarts, so clients keep their list of addresses."""

    config: Path
    db: Database
    ports: list[int]
    current: list[ServerProcess | None] = field(default_factory=list)
    incarnations: Counter[int] = field(default_factory=Counter)
    dead: list[str] = field(default_factory=list)  # process ids of killed replicas
    kills: int = 0

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}/mcp" for port in self.ports]

    async def start(self, index: int) -> None:
        self.incarnations[index] += 1
        server = ServerProcess(
            self.config,
            name=f"r{index}.{self.incarnations[index]}",
            http=True,
            port=self.ports[index],
            db=self.db.db_arg,
            log_level="INFO",
        )
        await server.start()
        self.current[index] = server

    async def kill(self, index: int) -> None:
        server = self.current[index]
        assert server is not None
        self.current[index] = None
        process_id = server.process_id()
        server.send_signal(signal.SIGKILL)
        await server.wait_exit()
        await server.__aexit__(None, None, None)
        self.dead.append(process_id)
        self.kills += 1

    async def stop_all(self) -> None:
        for server in self.current:
            if server is not None:
                await server.__aexit__(None, None, None)


@pytest.fixture(params=["postgres", "sqlite"])
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Cluster]:
    with database_for(request.param, tmp_path, "chaos") as database:
        config = write_config(
            tmp_path,
            database=database,
            runtime=RUNTIME,
            # PostgreSQL: a small pool per replica (three replicas and the tests share one server).
            storage={"pool_size": 6} if database.kind == "postgres" else None,
            agents=AGENTS,
            mcp_servers={"fixture": fixture_server(tmp_path / FIXTURE_LOG)},
        )
        cluster = Cluster(config, database, [_free_port() for _ in range(REPLICAS)], [None] * REPLICAS)
        try:
            async with anyio.create_task_group() as tg:
                for index in range(REPLICAS):
                    tg.start_soon(cluster.start, index)
            yield cluster
        finally:
            await cluster.stop_all()


class Refused(Exception):
    """A replica refused a call for a reason that is not the chaos (a bug)."""


@dataclass
class Caller:
    """The test's client: every call goes to a random replica; a call that gets no answer (the
    replica died, the connection broke, the database was away) goes to another one, the same call
    with the same client_message_id, until one answers."""

    urls: list[str]
    rng: random.Random
    http: httpx2.AsyncClient
    retries: int = 0
    slowest: float = 0.0

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        deadline = anyio.current_time() + 3 * CALL_DEADLINE_S
        pause = 0.05  # between attempts: doubling, and spread, so a restart is not met by a stampede
        while True:
            url = self.rng.choice(self.urls)
            began = anyio.current_time()
            try:
                with anyio.fail_after(WAIT_S + TEST_DEADLINE_S):
                    # One HTTP connection pool for every call (a client per call, without its own pool).
                    transport = streamable_http_client(url, http_client=self.http)
                    async with Client(transport, mode="2026-07-28") as client:
                        result = await client.call_tool(tool, arguments)
            except Exception:
                result = None
            self.slowest = max(self.slowest, anyio.current_time() - began)
            if result is not None:
                text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
                if not result.is_error:
                    assert result.structured_content is not None
                    return dict(result.structured_content)
                if "database" not in text:
                    raise Refused(f"{tool} {arguments} refused: {text}")
            self.retries += 1
            if anyio.current_time() > deadline:
                raise AssertionError(f"no replica answered {tool} {arguments} in time")
            pause = min(2 * pause, 0.5)
            await anyio.sleep(self.rng.uniform(0, pause))


@dataclass
class Conversation:
    """One session and the messages it got accepted, each with the answer it must end with."""

    index: int
    agent: str
    session_id: str | None = None
    sent: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # append_note calls asked for


def _message(conversation: Conversation, step: int, rng: random.Random) -> str:
    """The next message: a text turn, a read, a write, a durable wait, or (careful) a write to approve."""
    tag = f"s{conversation.index}.{step}"
    kinds = ["text", "read", "write", "wait"] if conversation.agent == "worker" else ["text", "write"]
    kind = rng.choice(kinds)
    sleep = f"/sleep {rng.choice([0, 0.05, 0.2, 0.5])}\n"
    if kind == "read":
        return f'{sleep}/tool fixture__read_thing {{"name": "{tag}"}}\n{tag}'
    if kind == "write":
        conversation.notes.append(tag)
        return f'{sleep}/tool fixture__append_note {{"note": "{tag}"}}\n{tag}'
    if kind == "wait":
        return f"/wait {rng.choice([0.1, 0.3])} nap\n{tag}"
    return f"{sleep}{tag}"


async def _converse(
    conversation: Conversation, client: Caller, stop: anyio.Event, rng: random.Random
) -> None:
    step = 0
    while not stop.is_set():
        text = _message(conversation, step, rng)
        key = f"c{conversation.index}.{step}"
        if conversation.session_id is None:
            outcome = await client.call(
                "start_session",
                agent=conversation.agent,
                message=text,
                client_message_id=key,
                wait_seconds=WAIT_S,
            )
            conversation.session_id = outcome["session_id"]
        else:
            outcome = await client.call(
                "send_message",
                session_id=conversation.session_id,
                message=text,
                client_message_id=key,
                wait_seconds=WAIT_S,
            )
        conversation.sent.append(text)
        step += 1
        while outcome["status"] != "answered":
            if outcome["status"] == "waiting_for_input":
                decisions = [{"interrupt_id": p["id"], "approved": True} for p in outcome["pending"]]
                outcome = await client.call(
                    "approve", session_id=conversation.session_id, decisions=decisions, wait_seconds=WAIT_S
                )
            elif outcome["status"] == "running":
                # The same message again: the turn that takes it, waited for once more.
                outcome = await client.call(
                    "send_message",
                    session_id=conversation.session_id,
                    message=text,
                    client_message_id=key,
                    wait_seconds=WAIT_S,
                )
            else:
                raise AssertionError(f"session {conversation.session_id}: turn ended {outcome}")
        expected = f"You said: {text.splitlines()[-1]} (message {step} of this session)"
        assert outcome["answer"].startswith(expected), (expected, outcome["answer"])


@dataclass
class Takeovers:
    """How long the sessions a killed replica held stayed leased by it."""

    delays: list[float] = field(default_factory=list)


async def _chaos(cluster: Cluster, stop: anyio.Event, rng: random.Random, takeovers: Takeovers) -> None:
    """Until `stop`: every second or so, while all three run, SIGKILL a random replica and start it
    again on its port after a moment; follow how soon its leases are taken over."""
    async with anyio.create_task_group() as tg:
        while not stop.is_set():
            with anyio.move_on_after(rng.uniform(0.5, 2.0)):
                await stop.wait()
            running = [i for i, server in enumerate(cluster.current) if server is not None]
            if stop.is_set() or len(running) < REPLICAS:
                continue  # one replica down at a time: the two others carry on
            victim = rng.choice(running)
            dead = cluster.current[victim]
            assert dead is not None
            await cluster.kill(victim)
            tg.start_soon(_taken_over, cluster, dead.process_id(), anyio.current_time(), takeovers)
            tg.start_soon(_restart, cluster, victim, rng.uniform(0.1, 1.0))


async def _restart(cluster: Cluster, index: int, after_s: float) -> None:
    await anyio.sleep(after_s)
    await cluster.start(index)


async def _taken_over(cluster: Cluster, process_id: str, killed_at: float, takeovers: Takeovers) -> None:
    """Wait until no running session is leased by the killed process any more."""

    def held() -> int:
        rows = cluster.db.rows(
            "SELECT count(*) FROM sessions WHERE status = 'running' AND lease_owner LIKE ?",
            (f"{process_id}#%",),
        )
        return int(rows[0][0])

    with anyio.fail_after(TEST_DEADLINE_S):
        # The leases live in the database; there is no event to await.
        while await anyio.to_thread.run_sync(held):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    takeovers.delays.append(anyio.current_time() - killed_at)


async def test_random_kills_of_replicas_lose_no_message_and_repeat_no_write(cluster: Cluster) -> None:
    async with AsyncExitStack() as stack:
        await _run(cluster, stack)


async def _run(cluster: Cluster, stack: AsyncExitStack) -> None:
    seed = int(os.environ.get("PARLEY_CHAOS_SEED") or random.randrange(2**32))
    print(f"\nchaos on {cluster.db.kind}: seed {seed} (PARLEY_CHAOS_SEED replays it)")
    rng = random.Random(seed)
    conversations = [Conversation(i, "careful" if i % 4 == 0 else "worker") for i in range(SESSIONS)]
    http = await stack.enter_async_context(
        http_client(timeout=WAIT_S + TEST_DEADLINE_S, limits=httpx2.Limits(max_connections=None))
    )
    clients = [Caller(cluster.urls, random.Random(rng.random()), http) for _ in conversations]
    stop = anyio.Event()
    takeovers = Takeovers()
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_chaos, cluster, stop, random.Random(rng.random()), takeovers)
        async with anyio.create_task_group() as talks:
            for conversation, client in zip(conversations, clients, strict=True):
                talks.start_soon(_converse, conversation, client, stop, random.Random(rng.random()))
            await anyio.sleep(CHAOS_S)
            stop.set()
            stopped = time.monotonic()
    elapsed = time.monotonic() - started
    settle = time.monotonic() - stopped

    db = cluster.db
    turns = sum(len(c.sent) for c in conversations)
    sessions = dict(db.rows("SELECT id, status FROM sessions"))
    assert len(sessions) == SESSIONS
    # Every turn ended.
    assert set(sessions.values()) == {"idle"}, Counter(sessions.values())
    # No lease is held once lease_ttl_s has passed: a live replica lets go of a session as it rests,
    # a killed one's lapses (its row may still name it: nothing needs to claim a resting session).
    await anyio.sleep(RUNTIME["lease_ttl_s"])
    held = db.rows(
        "SELECT id, lease_owner FROM sessions WHERE lease_owner IS NOT NULL AND lease_expires_at > ?",
        (time.time(),),
    )
    assert held == []
    stale = db.rows("SELECT id, lease_owner, lease_expires_at FROM sessions WHERE lease_owner IS NOT NULL")
    alive = [row for row in stale if str(row[1]).rpartition("#")[0] not in cluster.dead]
    assert alive == [], f"leases of live replicas left on resting sessions (dead: {cluster.dead})"
    for conversation in conversations:
        sid = conversation.session_id
        # Each accepted message was taken into exactly one turn, which answered it; none twice.
        queued = db.rows("SELECT status, turn_id FROM queued_messages WHERE session_id = ?", (sid,))
        assert len(queued) == len(conversation.sent) and {s for s, _ in queued} == {"consumed"}
        turn_rows = db.rows("SELECT queued_message_id, status FROM turns WHERE session_id = ?", (sid,))
        assert len(turn_rows) == len(conversation.sent), (sid, turn_rows)
        assert len({q for q, _ in turn_rows}) == len(turn_rows) and {s for _, s in turn_rows} == {"answered"}
        users = db.rows("SELECT count(*) FROM messages WHERE session_id = ? AND role = 'user'", (sid,))
        assert users == [(len(conversation.sent),)]
    # No write ran twice (the fixture server logs every call it really runs).
    writes = Counter(
        r["arguments"]["note"]
        for r in fixture_calls(cluster.config.parent / FIXTURE_LOG)
        if r["tool"] == "append_note"
    )
    duplicates = {note: n for note, n in writes.items() if n > 1}
    asked = [note for c in conversations for note in c.notes]
    unknown = db.rows("SELECT count(*) FROM tool_calls WHERE status = 'outcome_unknown'")[0][0]
    succeeded = {
        json.loads(args)["note"] if isinstance(args, str) else args["note"]
        for (args,) in db.rows(
            "SELECT arguments FROM tool_calls WHERE tool = 'append_note' AND status = 'succeeded'"
        )
    }
    assert all(writes[note] == 1 for note in succeeded), "a write recorded as done ran exactly once"
    # Turns whose steps were committed by more than one process: taken over after a kill.
    recovered = db.rows(
        "SELECT count(*) FROM (SELECT turn_id FROM steps GROUP BY turn_id HAVING count(DISTINCT process_id) > 1) t"
    )[0][0]
    print(
        f"chaos on {cluster.db.kind}: seed {seed}: {SESSIONS} sessions, {turns} turns, {len(asked)} writes "
        f"({unknown} outcome unknown), {cluster.kills} kills, {recovered} recovered turns, "
        f"{sum(c.retries for c in clients)} calls retried on another replica, duplicates = {len(duplicates)}; "
        f"a killed replica's sessions taken over after {max(takeovers.delays, default=0):.1f}s at most "
        f"(lease_ttl_s {RUNTIME['lease_ttl_s']}); slowest call {max(c.slowest for c in clients):.1f}s; "
        f"{elapsed:.1f}s ({settle:.1f}s to finish after the chaos)"
    )
    assert len(takeovers.delays) == cluster.kills, "every killed replica's sessions were taken over"
    assert duplicates == {}, f"writes that ran more than once: {duplicates}"
    assert cluster.kills > 0 and turns >= SESSIONS
