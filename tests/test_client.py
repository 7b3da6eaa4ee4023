"""parley.client against parley served over streamable HTTP (in this process): a conversation, approvals and questions by callback and by explicit call, a
`running` turn waited through, a send retried after the connection dropped (sent once), a turn
followed as an MCP task, refusals as typed errors, events, and the blocking wrapper. The same tests
run over stdio, where the client starts `parley serve` itself, in tests/test_e2e_client.py."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

import parley.client as pc
from parley.client import sync
from tests.support import (
    FIXTURE_LOG,
    TEST_DEADLINE_S,
    InProcessServer,
    db_rows,
    fixture_in_process,
    fixture_runs,
    write_config,
)

pytestmark = pytest.mark.anyio

# The server waits at most this long in one call, so a turn longer than it comes back `running`
# and the client has to wait it through.
WAIT_S = 0.5
SLOW = "/sleep 1.5\nslow"
BARE = '/tool fixture__bare {"text": "%s"}'  # an MCP tool without annotations: it needs approval
UNKNOWN_INTERRUPT = "int_" + "0" * 32


@dataclass
class World:
    transport: str
    directory: Path
    parley: pc.Parley
    connect: Callable[..., AbstractAsyncContextManager[pc.Parley]]  # another client like `parley`
    server: InProcessServer | None = None

    @property
    def config(self) -> Path:
        return self.directory / "parley.yaml"

    def runs(self, text: str) -> int:
        return fixture_runs(self.directory, "bare", text=text)


def _config(directory: Path, fixture: dict[str, Any]) -> Path:
    return write_config(
        directory,
        agents={
            "worker": {"mcp_servers": ["fixture"], "tools": ["ask_user"]},
            "guarded": {"mcp_servers": ["fixture"], "tools": ["ask_user"], "approver": "human"},
        },
        mcp_servers={"fixture": fixture},
        tasks={"poll_interval_s": 0.05},
    )


OPTIONS = pc.Options(wait_s=WAIT_S, reconnect_s=TEST_DEADLINE_S)


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("client-http")
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = _config(directory, fixture)
        async with InProcessServer(config, http=True) as server:
            url = server.url or ""

            def connect_http(**changes: Any) -> AbstractAsyncContextManager[pc.Parley]:
                merged = replace(OPTIONS, **changes)
                return pc.connect_http(url, options=merged)

            async with connect_http() as parley:
                yield World("http", directory, parley, connect_http, server)


def _user_messages(state: pc.SessionState) -> list[str]:
    return [m.text for m in state.messages if m.role == "user"]


async def test_a_conversation_keeps_its_history(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        s = await world.parley.start("worker", "hello there")
        assert s.status == "answered"
        assert s.answer == "You said: hello there (message 1 of this session)"
        reply = await s.send("and again")
        state = await s.state()
    assert reply.answer == "You said: and again (message 2 of this session)"
    assert _user_messages(state) == ["hello there", "and again"]
    assert state.agent == "worker" and state.usage.model_calls == 2


async def test_an_approval_is_decided_by_the_callback(world: World) -> None:
    asked: list[pc.Interrupt] = []

    def allow(interrupt: pc.Interrupt) -> bool:
        asked.append(interrupt)
        return True

    with anyio.fail_after(TEST_DEADLINE_S):
        s = await world.parley.start("worker", BARE % "by callback", on_approval=allow)
    assert s.status == "answered", s.last
    [interrupt] = asked
    assert (interrupt.kind, interrupt.tool, interrupt.arguments) == (
        "approval",
        "fixture__bare",
        {"text": "by callback"},
    )
    assert s.last is not None and [c.status for c in s.last.tool_calls] == ["succeeded"]
    assert world.runs("by callback") == 1


async def test_an_approval_is_decided_by_an_explicit_call(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        s = await world.parley.start("worker", BARE % "explicit no")
        assert s.status == "waiting_for_input"
        [interrupt] = s.pending
        assert interrupt.kind == "approval" and interrupt.tool == "fixture__bare"
        rejected = await s.reject(reason="not on Fridays")
        assert rejected.status == "answered" and "not on Fridays" in (rejected.answer or "")
        waiting = await s.send(BARE % "explicit yes")
        assert waiting.status == "waiting_for_input"
        approved = await s.approve()
    assert approved.status == "answered"
    assert world.runs("explicit no") == 0 and world.runs("explicit yes") == 1


async def test_a_question_is_answered_by_the_callback_and_by_an_explicit_call(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        s = await world.parley.start("worker", "/ask Ship it? | yes | no", on_question=lambda q: "yes")
        assert "The user answered: yes" in (s.answer or "")
        waiting = await s.send("/ask Which colour? | red | blue")
        assert waiting.status == "waiting_for_input"
        [question] = s.pending
        assert (question.question, question.choices) == ("Which colour?", ["red", "blue"])
        answered = await s.answer_question(question, "blue")
        assert "The user answered: blue" in (answered.answer or "")
        await s.send("/ask Anything else?")
        declined = await s.decline(s.pending[0])
    assert declined.status == "answered" and "declined" in (declined.answer or "").lower()


async def test_a_running_turn_is_waited_through(world: World) -> None:
    seen: list[pc.Event] = []
    started = anyio.current_time()
    with anyio.fail_after(TEST_DEADLINE_S):
        s = await world.parley.start("worker")
        outcome = await s.send(SLOW, on_event=seen.append)
    # The turn took 1.5 s, the server waited at most 0.5 s per call: it came back `running` and the
    # client waited again until the turn ended, with one message and one turn.
    assert anyio.current_time() - started >= 1.5
    assert outcome.status == "answered" and outcome.answer == "You said: slow (message 1 of this session)"
    assert seen[0] == pc.TurnStarted() and seen[-1] == pc.TurnEnded("answered")
    assert pc.Text("You said: slow (message 1 of this session)") in seen
    assert _user_messages(await s.state()) == [SLOW]


async def test_events_follow_a_turn_sent_by_the_same_client(world: World) -> None:
    seen: list[pc.Event] = []
    with anyio.fail_after(TEST_DEADLINE_S):
        s = await world.parley.start("worker")
        async with s.events() as feed, anyio.create_task_group() as tg:

            async def follow() -> None:
                async for event in feed:
                    seen.append(event)
                    if isinstance(event, pc.TurnEnded):
                        return

            tg.start_soon(follow)
            await s.send("over events")
    assert seen[0] == pc.TurnStarted() and seen[-1] == pc.TurnEnded("answered")
    assert pc.Text("You said: over events (message 1 of this session)") in seen


def _child_servers(config: Path) -> list[int]:
    """The `parley serve` processes this test process started on `config`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == str(os.getpid()) and str(config).encode() in cmdline:
            found.append(int(pid))
    return found


class Proxy:
    """A TCP proxy in front of the HTTP server whose open connections a test can cut."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._open: set[SocketStream] = set()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[int]) -> None:
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
            await listener.serve(self._relay)

    async def _relay(self, client: SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", self.port) as upstream:
            self._open |= {client, upstream}

            async def pump(a: SocketStream, b: SocketStream) -> None:
                try:
                    async for chunk in a:
                        await b.send(chunk)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
                finally:
                    await b.aclose()

            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, client, upstream)
                tg.start_soon(pump, upstream, client)
            self._open -= {client, upstream}

    async def cut(self) -> None:
        for stream in list(self._open):
            await stream.aclose()


@asynccontextmanager
async def _dropping_client(world: World) -> AsyncIterator[tuple[pc.Parley, Callable[[], Any]]]:
    """A client whose connection the returned function breaks: over stdio by killing the server
    it started (the next call starts another on the same database), over HTTP by cutting the
    connections through a proxy."""
    if world.transport == "stdio":
        others = set(_child_servers(world.config))  # the module's own client's server stays
        async with world.connect() as parley:
            [ours] = set(_child_servers(world.config)) - others

            async def kill() -> None:
                os.kill(ours, signal.SIGKILL)

            yield parley, kill
        return
    assert world.server is not None and world.server.url is not None
    server_port = int(world.server.url.split(":")[2].split("/")[0])
    proxy = Proxy(server_port)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve)
        # The server answers only its own Host (DNS-rebinding guard): the proxy is invisible to it.
        host = {"Host": f"127.0.0.1:{server_port}"}
        async with pc.connect_http(f"http://127.0.0.1:{port}/mcp", headers=host, options=OPTIONS) as parley:
            yield parley, proxy.cut
        tg.cancel_scope.cancel()


async def test_the_event_stream_follows_from_now_whoever_calls_and_survives_a_dropped_connection(
    world: World,
) -> None:
    if world.transport != "http":
        pytest.skip("the event stream is HTTP's; stdio follows the progress of its own calls")
    seen: list[pc.Event] = []
    with anyio.fail_after(2 * TEST_DEADLINE_S):
        s = await world.parley.start("worker", "before the feed")
        async with _dropping_client(world) as (watcher, drop):
            async with watcher.session(s.id).events() as feed, anyio.create_task_group() as tg:

                async def follow() -> None:
                    async for event in feed:
                        seen.append(event)
                        if isinstance(event, pc.ToolStarted):
                            await drop()  # the stream's connection goes; the feed reopens it
                        if isinstance(event, pc.TurnEnded):
                            return

                tg.start_soon(follow)
                # Another client's turn: a tool call, then the answer quoting its result.
                outcome = await s.send('/tool fixture__read_thing {"name": "dropped"}')
            assert watcher.reconnects == 0  # the MCP connection was idle: only the stream was cut
    assert outcome.status == "answered" and outcome.answer
    # Nothing of the turn before the feed was made, nothing twice, nothing missed.
    assert not any(isinstance(e, pc.Text) and "before the feed" in e.text for e in seen)
    assert seen[0] == pc.TurnStarted() and seen[-1] == pc.TurnEnded("answered")
    assert seen.count(pc.TurnStarted()) == 1
    assert seen.count(pc.ToolStarted("fixture__read_thing")) == 1
    finished = seen.index(pc.ToolFinished("fixture__read_thing", "succeeded"))
    assert "".join(e.text for e in seen[finished:] if isinstance(e, pc.Text)) == outcome.answer


async def test_a_send_retried_after_the_connection_dropped_is_sent_once(world: World) -> None:
    with anyio.fail_after(2 * TEST_DEADLINE_S):
        async with _dropping_client(world) as (parley, drop):
            s = await parley.start("worker")
            dropped = anyio.Event()

            async def drop_once_started(event: pc.Event) -> None:
                if isinstance(event, pc.TurnStarted) and not dropped.is_set():
                    dropped.set()
                    await drop()

            outcome = await s.send("/sleep 1\nonce", on_event=drop_once_started)
            assert dropped.is_set()
            assert parley.reconnects >= 1
            state = await s.state()
    assert outcome.status == "answered" and outcome.answer == "You said: once (message 1 of this session)"
    assert _user_messages(state) == ["/sleep 1\nonce"]
    assert state.turn_count == 1


async def test_a_turn_is_followed_as_an_mcp_task_when_asked(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        async with world.connect(tasks=True) as parley:
            assert parley.uses_tasks
            s = await parley.start("worker", SLOW)
            assert s.answer == "You said: slow (message 1 of this session)"
            waiting = await s.send("/ask Task or not? | task | not")
            assert waiting.status == "waiting_for_input" and s.pending[0].question == "Task or not?"
            answered = await s.answer_question(s.pending[0], "task")
            by_callback = await s.send(BARE % "in a task", on_approval=lambda i: True)
    assert "The user answered: task" in (answered.answer or "")
    assert by_callback.status == "answered" and world.runs("in a task") == 1
    tasks = db_rows(
        world.directory / "parley.db", "SELECT tool, status FROM tasks WHERE session_id = ?", (s.id,)
    )
    assert ("start_session", "completed") in tasks and ("answer_question", "completed") in tasks


async def test_refusals_are_typed_errors_carrying_the_servers_text(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        with pytest.raises(pc.UnknownAgent, match="No agent named 'nobody'"):
            await world.parley.start("nobody", "hi")
        with pytest.raises(pc.SessionNotFound) as missing:
            await world.parley.resume("ses_" + "0" * 32)
        assert missing.value.tool == "get_session" and "ses_" + "0" * 32 in missing.value.text
        s = await world.parley.start("worker", "hi")
        with pytest.raises(pc.InterruptNotFound):
            await s.approve(UNKNOWN_INTERRUPT)
        guarded = await world.parley.start("guarded", BARE % "guarded")
        assert guarded.status == "waiting_for_input"
        with pytest.raises(pc.NotYourDecision, match="only from a person"):
            await guarded.approve()
        await guarded.close()
        with pytest.raises(pc.SessionClosed):
            await guarded.send("anyone there?")
    assert world.runs("guarded") == 0


async def test_the_blocking_client_holds_a_conversation(world: World) -> None:
    def converse() -> list[Any]:
        if world.transport == "stdio":
            connect = sync.connect_stdio(world.config, on_question=lambda q: q.choices[-1])
        else:
            assert world.server is not None and world.server.url is not None
            connect = sync.connect_http(world.server.url, on_question=lambda q: q.choices[-1])
        with connect as p:
            s = p.start("worker", "hello")
            first = s.answer
            asked = s.send("/ask Which? | a | b")
            waiting = s.send(BARE % "blocking")
            done = s.approve()
            return [first, asked.answer, waiting.status, done.status]

    with anyio.fail_after(TEST_DEADLINE_S):
        first, asked, waiting, done = await anyio.to_thread.run_sync(converse)
    assert first == "You said: hello (message 1 of this session)"
    assert "The user answered: b" in asked
    assert (waiting, done) == ("waiting_for_input", "answered")
    assert world.runs("blocking") == 1


async def test_a_message_queued_behind_a_turn_that_waits_for_input_does_not_wait_forever(
    world: World,
) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        s = await world.parley.start("worker", "/ask First things first? | yes | no")
        blocked = await s.send("second")
        # The message queues behind the question: the outcome is that turn's, saying so.
        assert blocked.status == "waiting_for_input" and blocked.pending[0].question == "First things first?"
        assert any("is queued behind turn" in note for note in blocked.notes)
        # With a callback, the question is answered and the queued message's own turn follows.
        s2 = await world.parley.start("worker", "/ask Again first? | yes | no")
        answered = await s2.send("after it", on_question=lambda q: "yes")
    assert (
        answered.status == "answered" and answered.answer == "You said: after it (message 2 of this session)"
    )


@pytest.mark.parametrize("as_task", [False, True], ids=["blocking", "task"])
async def test_as_the_person_the_callbacks_decide_for_an_agent_that_takes_only_a_persons_word(
    world: World, as_task: bool
) -> None:
    text = f"as the person, {'task' if as_task else 'blocking'}"
    with anyio.fail_after(TEST_DEADLINE_S):
        async with world.connect(as_person=True, tasks=as_task) as parley:
            s = await parley.start("guarded", BARE % text, on_approval=lambda i: True)
            started = s.answer
            asked = await s.send("/ask Sure? | yes | no", on_question=lambda q: "yes")
            left = await s.send(BARE % "left for later")
            state = await s.state()
    assert f"bare {text}" in (started or "")
    assert world.runs(text) == 1
    assert "The user answered: yes" in (asked.answer or "")
    # Undecided by any callback: the form was dismissed, the approval waits.
    assert left.status == "waiting_for_input" and left.pending[0].tool == "fixture__bare"
    via = {d.via for d in state.decisions if d.outcome == "ok"}
    assert via == ({"task_input"} if as_task else {"mrtr"})
