"""`parley chat`: a conversation with an agent in the terminal, over the client.

The agent's text and its tool calls are shown as the turn runs; approvals and questions are asked
inline; Ctrl-C cancels the running turn (twice quits). Lines typed while a turn runs are commands
(/cancel, /steer ...) or messages kept until the turn ends. Only the latest turn call's events and
outcome are shown: every waiting call receives all of the session's events, so a /steer call
takes over the screen from the call it interrupts.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import anyio
from anyio.abc import TaskGroup

from parley.client.client import Parley, connect_http, connect_stdio
from parley.client.errors import ClientError, ToolError
from parley.client.events import Event, Notice, Text, ToolFinished, ToolProgress, ToolStarted, TurnStarted
from parley.client.handlers import OnEvent
from parley.client.models import Interrupt, Outcome
from parley.client.session import Session
from parley.client.terminal import LineReader, Terminal

HELP = """\
Type a message and press Enter. Commands:
  /cancel         cancel the running turn (or Ctrl-C; Ctrl-C twice quits)
  /steer TEXT     stop the running turn after its current step, and answer TEXT next
  /sessions       list your sessions
  /resume ID      continue session ID
  /new [AGENT]    start a new session with your next message
  /help           this help
  /quit           quit (or Ctrl-D)
Other lines starting with / are sent as they are (the demo agent's /sleep, /ask, /tool ...)."""
# A second Ctrl-C within this time quits.
DOUBLE_INTERRUPT_S = 2.0

TurnCall = Callable[[OnEvent], Awaitable[Outcome]]


class Chat:
    def __init__(self, parley: Parley, terminal: Terminal, reader: LineReader, agent: str | None) -> None:
        self.p = parley
        self.term = terminal
        self.reader = reader
        self.agent = agent
        self.session: Session | None = None
        self._queued: list[str] = []
        self._calls = 0  # turn calls made
        self._current = 0  # the call whose events and outcome are shown
        self._active = 0  # turn calls in flight
        self._idle = anyio.Event()
        self._final: Outcome | None = None
        self._streamed = ""  # the current call's text since its last tool line
        self._last_interrupt = -math.inf
        self._eof = False

    async def run(self, resume: str | None) -> int:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._on_ctrl_c)
            if resume is not None:
                await self._resume(resume)
            elif not await self._choose_agent():
                tg.cancel_scope.cancel()
                return 2
            await self._loop()
            tg.cancel_scope.cancel()
        return 0

    # ------------------------------------------------------------------ the conversation

    async def _loop(self) -> None:
        while True:
            line = await self._next_line("you> ")
            if line is None:
                return
            line = line.strip()
            if not line:
                continue
            if line.startswith("/") and await self._command(line):
                if line in ("/quit", "/exit"):
                    return
                continue
            await self._send(line)

    async def _send(self, text: str) -> None:
        session = await self._session()
        if session is not None:
            await self._turn(lambda on_event: session.send(text, on_event=on_event))

    async def _next_line(self, prompt: str) -> str | None:
        """The next line: one typed while a turn ran, else a new one (None at the end of input)."""
        if self._queued:
            line: str | None = self._queued.pop(0)
        elif self._eof:
            return None
        else:
            self.term.prompt(prompt)
            line = await self.reader.next()
        if line is None:
            self._eof = True
        elif not self.term.styled:
            self.term.line(f"you: {line}")  # so that a transcript shows both sides
        return line

    async def _session(self) -> Session | None:
        if self.session is None:
            try:
                # Started empty, then sent to: the session id is known before the first turn runs,
                # so that turn can be cancelled like any other.
                self.session = await self.p.start(self.agent or "")
            except ToolError as exc:
                self.term.error(exc.text)
                return None
            self.term.note(f"session {self.session.id} with {self.agent}")
        return self.session

    async def _turn(self, call: TurnCall) -> None:
        """Run a turn call, then ask for what the turn waits for, until it rests."""
        outcome = await self._follow(call)
        while outcome is not None and outcome.status == "waiting_for_input":
            decision = await self._decision(outcome)
            if decision is None:
                return
            outcome = await self._follow(decision)

    async def _follow(self, call: TurnCall) -> Outcome | None:
        """Run a turn call while reading lines (commands act now; messages wait for the turn)."""
        self._final = None
        self._idle = anyio.Event()
        async with anyio.create_task_group() as tg:
            self._launch(tg, call)
            with anyio.CancelScope() as reading:
                tg.start_soon(self._stop_when_idle, reading)
                while True:
                    line = await self.reader.next()
                    if line is None:
                        self._eof = True
                        await self._idle.wait()  # the input ended: let the turn finish, then quit
                        break
                    await self._during_turn(line.strip(), tg)
        # A Ctrl-C that cancelled this turn does not make the next one quit.
        self._last_interrupt = -math.inf
        return self._final

    async def _stop_when_idle(self, reading: anyio.CancelScope) -> None:
        await self._idle.wait()
        reading.cancel()

    def _launch(self, tg: TaskGroup, call: TurnCall) -> None:
        self._calls += 1
        number = self._calls
        self._current = number
        self._active += 1
        self._streamed = ""

        async def run() -> None:
            try:
                outcome = await call(self._printer(number))
                if number == self._current:
                    self._final = outcome
                    self._show(outcome)
            except ToolError as exc:
                if number == self._current:
                    self.term.error(exc.text)
            except ClientError as exc:
                self.term.error(str(exc))
            finally:
                self._active -= 1
                if self._active == 0:
                    self._idle.set()

        tg.start_soon(run)

    async def _during_turn(self, line: str, tg: TaskGroup) -> None:
        word, _, rest = line.partition(" ")
        if word == "/cancel":
            self._cancel()
        elif word == "/steer" and rest.strip() and self.session is not None:
            session, text = self.session, rest.strip()
            self._launch(tg, lambda on_event: session.steer(text, on_event=on_event))
        elif word in ("/quit", "/exit"):
            self._quit()
        elif word == "/help":
            self.term.line(HELP)
        elif line:
            self._queued.append(line)
            if self.term.styled:
                self.term.note("a turn is running: this is sent when it ends (/steer sends it now)")

    # ------------------------------------------------------------------ showing a turn

    def _printer(self, number: int) -> OnEvent:
        def show(event: Event) -> None:
            if number != self._current:
                return
            if isinstance(event, TurnStarted) and self.term.styled:
                self.term.note("working (Ctrl-C cancels)")
            elif isinstance(event, Text):
                self.term.stream(event.text, self.agent or "agent")
                self._streamed += event.text
            elif isinstance(event, ToolStarted):
                self._streamed = ""
                self.term.note(f"tool {event.tool} started")
            elif isinstance(event, ToolFinished):
                self.term.note(f"tool {event.tool} {event.status}")
            elif isinstance(event, ToolProgress):
                self.term.note(f"tool {event.tool}: {event.message}")
            elif isinstance(event, Notice):
                self.term.note(event.text)

        return show

    def _show(self, outcome: Outcome) -> None:
        answer = (outcome.answer or "").strip()
        if (
            outcome.status in ("answered", "completed")
            and answer
            and not self._streamed.strip().endswith(answer)
        ):
            self.term.stream(answer, self.agent or "agent")
        self.term.end_stream()
        if outcome.status == "completed":
            self.term.line(f"result: {json.dumps(outcome.result, ensure_ascii=False)}", "green")
            self.term.note("the task session is complete")
        elif outcome.status == "failed":
            self.term.error(f"the turn failed: {outcome.error or 'no reason given'}")
        elif outcome.status == "cancelled":
            self.term.note("turn cancelled")
        elif outcome.status == "running":
            self.term.note("the turn is still running on the server")
        if outcome.session_status == "closed":
            self.term.note("the session is closed; /new starts another")

    # ------------------------------------------------------------------ approvals and questions

    async def _decision(self, outcome: Outcome) -> TurnCall | None:
        """Ask about the first pending interrupt; the call that sends the decision."""
        session = self.session
        if session is None or not outcome.pending:
            return None
        interrupt = outcome.pending[0]
        while True:
            if interrupt.kind == "approval":
                arguments = json.dumps(interrupt.arguments or {}, ensure_ascii=False)
                self.term.line(
                    f"{self.agent} wants to call {interrupt.tool} ({interrupt.effect}) with {arguments}. "
                    "Allow? [y/n, or n REASON]",
                    "bold",
                )
            else:
                self.term.line(_question_text(interrupt), "bold")
            line = await self._next_line("> ")
            if line is None or line.strip() in ("/quit", "/exit"):
                self._eof = True
                return None
            line = line.strip()
            if line == "/cancel":
                return lambda on_event: session.cancel()
            made = _decided(session, interrupt, line)
            if isinstance(made, str):
                self.term.error(made)
                continue
            return made

    # ------------------------------------------------------------------ commands

    async def _command(self, line: str) -> bool:
        """Run a chat command; False for other /lines (they are messages)."""
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        if word in ("/quit", "/exit"):
            return True
        if word == "/help":
            self.term.line(HELP)
        elif word == "/sessions":
            await self._list_sessions()
        elif word in ("/resume", "/session") and rest:
            await self._resume(rest)
        elif word == "/new":
            self.session = None
            self.agent = rest or self.agent
            self.term.note(f"your next message starts a new session with {self.agent}")
        elif word == "/cancel":
            session = self.session
            if session is None:
                self.term.note("no session yet")
            else:
                await self._turn(lambda on_event: session.cancel())
        elif word == "/steer" and rest:
            self.term.note("nothing is running: sending it as a message")
            self._queued.insert(0, rest)
        else:
            return False
        return True

    async def _list_sessions(self) -> None:
        try:
            page = await self.p.list_sessions(limit=20)
        except ClientError as exc:
            self.term.error(str(exc))
            return
        if not page.sessions:
            self.term.line("no sessions yet")
        for s in page.sessions:
            mark = "*" if self.session is not None and s.session_id == self.session.id else " "
            self.term.line(
                f"{mark} {s.session_id}  {s.agent:<12} {s.status:<18} turns={s.turn_count}  {s.updated_at}"
            )

    async def _resume(self, session_id: str) -> None:
        try:
            session = await self.p.resume(session_id)
        except ClientError as exc:
            self.term.error(str(exc))
            return
        self.session, self.agent = session, session.agent
        last = session.last
        self.term.note(
            f"resumed session {session.id} with {session.agent}"
            + (f"; its last turn: {last.status}" if last else "")
        )
        if last is not None and last.status in ("waiting_for_input", "running"):
            await self._turn(lambda on_event: session.wait(on_event=on_event))

    async def _choose_agent(self) -> bool:
        try:
            agents = (await self.p.agents()).agents
        except ClientError as exc:
            self.term.error(str(exc))
            return False
        names = [a.name for a in agents]
        if self.agent is None and len(names) == 1:
            self.agent = names[0]
        if self.agent not in names:
            known = ", ".join(names) or "none"
            self.term.error(f"name an agent: parley chat AGENT (this server has: {known})")
            return False
        description = next(a.description for a in agents if a.name == self.agent)
        self.term.line(f"parley chat with {self.agent}" + (f": {description}" if description else ""), "dim")
        self.term.line("/help for commands; Ctrl-C cancels a turn, twice quits; Ctrl-D quits.", "dim")
        return True

    # ------------------------------------------------------------------ stopping

    def _cancel(self, say: bool = True) -> None:
        session = self.session
        if session is None:
            return
        if say:
            self.term.note("cancelling the turn")

        async def cancel() -> None:
            try:
                await session.cancel()
            except ClientError as exc:
                self.term.error(str(exc))

        self._tg.start_soon(cancel)

    def _quit(self) -> None:
        self.term.end_stream()
        if self._active and self.session is not None:
            self.term.note(
                f"the turn goes on on the server; parley chat --session {self.session.id} resumes it"
            )
        self._tg.cancel_scope.cancel()

    async def _on_ctrl_c(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                now = anyio.current_time()
                if now - self._last_interrupt < DOUBLE_INTERRUPT_S:
                    self._quit()
                    return
                self._last_interrupt = now
                if self._active:
                    self.term.note("Ctrl-C: cancelling the turn (Ctrl-C again quits)")
                    self._cancel(say=False)
                else:
                    self.term.note("Ctrl-C again (or /quit, or Ctrl-D) quits")


def _question_text(interrupt: Interrupt) -> str:
    text = f"{interrupt.question or 'The agent asks a question.'}"
    if interrupt.choices:
        text += "  " + "  ".join(f"{n}) {c}" for n, c in enumerate(interrupt.choices, start=1))
    return text + "  [/decline to decline]"


def _decided(session: Session, interrupt: Interrupt, line: str) -> TurnCall | str:
    """The call for what was typed at an approval or question prompt, or what is wrong with it."""
    if interrupt.kind == "approval":
        word, _, reason = line.partition(" ")
        if word.lower() in ("y", "yes"):
            return lambda on_event: session.approve(interrupt, on_event=on_event)
        if word.lower() in ("n", "no"):
            return lambda on_event: session.reject(
                interrupt, reason=reason.strip() or None, on_event=on_event
            )
        return "answer y or n (n REASON tells the agent why)"
    if line == "/decline":
        return lambda on_event: session.decline(interrupt, on_event=on_event)
    answer = line
    if line.isdigit() and 1 <= int(line) <= len(interrupt.choices):
        answer = interrupt.choices[int(line) - 1]
    if interrupt.choices and not interrupt.allows_free_text and answer not in interrupt.choices:
        return "answer with one of: " + ", ".join(interrupt.choices)
    if not answer:
        return "type an answer (or /decline)"
    return lambda on_event: session.answer_question(interrupt, answer, on_event=on_event)


async def run_chat(
    connect: AbstractAsyncContextManager[Parley], agent: str | None, resume: str | None, terminal: Terminal
) -> int:
    reader = LineReader()
    reader.start()
    try:
        async with connect as parley:
            return await Chat(parley, terminal, reader, agent).run(resume)
    except ClientError as exc:
        terminal.error(str(exc))
        return 1


def main(args: argparse.Namespace) -> int:
    """`parley chat` (parley/cli.py declares its arguments)."""
    from parley.config import secret_from_env

    terminal = Terminal()
    connect: AbstractAsyncContextManager[Parley]
    if args.url:
        token = args.token or secret_from_env(args.token_env)
        connect = connect_http(args.url, token)
    else:
        # The server's own log would interleave with the conversation: errors only.
        connect = connect_stdio(args.config, args.db, log_level="ERROR")
    return anyio.run(run_chat, connect, args.agent, args.session, terminal)
