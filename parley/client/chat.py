"""`parley chat`: a conversation with an agent in the terminal, over the client.

The agent's text and its tool calls are shown as the turn runs; approvals and questions are asked
inline; Ctrl-C cancels the running turn (twice quits). In plan mode a draft plan is shown after its
planning turn; /execute approves it (the executing turn follows), /discard drops it. Lines typed while a turn runs are commands
(/cancel, /steer ...) or messages kept until the turn ends. Only the latest turn call's events and
outcome are shown: every waiting call receives all of the session's events, so a /steer call
takes over the screen from the call it interrupts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from parley.client.client import Options, Parley, connect_http, connect_stdio
from parley.client.errors import ClientError, ToolError
from parley.client.events import Event, Notice, Text, ToolFinished, ToolProgress, ToolStarted, TurnStarted
from parley.client.handlers import ApprovalVerdict, Callbacks, Decline, OnEvent, QuestionVerdict, Reject
from parley.client.models import Interrupt, Outcome, Plan
from parley.client.session import Session
from parley.client.terminal import LineReader, Terminal

HELP = """\
Type a message and press Enter. Commands:
  /cancel         cancel the running turn (or Ctrl-C; Ctrl-C twice quits)
  /steer TEXT     stop the running turn after its current step, and answer TEXT next
  /plan TEXT      send TEXT as a planning turn (plan mode: the agent writes a plan to review)
  /plan           show the session's plan
  /execute        approve the draft plan shown and let the agent carry it out
  /discard        drop the draft plan; the next message is an ordinary turn
  /sessions       list your sessions
  /resume ID      continue session ID
  /new [AGENT]    start a new session with your next message
  /help           this help
  /quit           quit (or Ctrl-D)
Other lines starting with / are sent as they are (the demo agent's /sleep, /ask, /tool ...)."""
# Whoever types at the chat is a person: agents that take decisions only from one (approver:
# human) take the answers given at its prompts.
AS_PERSON = Options(as_person=True)
# A second Ctrl-C within this time quits.
DOUBLE_INTERRUPT_S = 2.0

# A turn call, given the chat's callbacks (its event printer, and its questions to the person).
TurnCall = Callable[[Callbacks], Awaitable[Outcome]]


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
        self._streamed = ""  # the current call's text since its last tool line
        self._last_interrupt = -math.inf
        self._eof = False
        self._answer: MemoryObjectSendStream[str | None] | None = None  # an open question's answer
        # Set once the person cancels the running turn: a form that reaches the chat after that
        # (the cancel typed before the question showed) is not put to them.
        self._cancelling = False
        self._turn_calls: TaskGroup | None = None  # the turn calls in flight, while there are any
        self._plan_modes: dict[str, bool] = {}  # which agents have plan mode (from list_agents)

    async def run(self, resume: str | None) -> int:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._on_ctrl_c)
            started = await self._resume(resume) if resume is not None else await self._choose_agent()
            if not started:
                tg.cancel_scope.cancel()
                return 1 if resume is not None else 2
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

    async def _send(self, text: str, plan: bool = False) -> None:
        first = self.session is None
        session = await self._session()
        if session is None:
            return
        # The session was started empty: its first message plans if its agent has plan mode, as
        # a start with the message would.
        plan = plan or (first and await self._plans_by_default())
        await self._turn(lambda callbacks: session.send(text, plan=plan, **callbacks))

    async def _plans_by_default(self) -> bool:
        if self.agent not in self._plan_modes:
            try:
                self._plan_modes = {a.name: a.plan_mode for a in (await self.p.agents()).agents}
            except ClientError:
                return False  # the message is sent as an ordinary turn; /plan asks for a plan
        return self._plan_modes.get(self.agent or "", False)

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
        """Run a turn call until its turn rests, reading lines meanwhile: they answer the agent's
        questions, or are commands (which act now), or messages (sent when the turn ends)."""
        self._idle = anyio.Event()
        async with anyio.create_task_group() as tg:
            self._turn_calls = tg
            self._launch(tg, call)
            with anyio.CancelScope() as reading:
                tg.start_soon(self._stop_when_idle, reading)
                while True:
                    line = await self.reader.next()
                    answering = self._answer
                    if answering is not None:
                        answering.send_nowait(line)  # the line answers the open question
                    if line is None:
                        self._eof = True
                        await self._idle.wait()  # the input ended: let the turn finish, then quit
                        break
                    if answering is None:
                        await self._during_turn(line.strip(), tg)
        self._turn_calls = None
        self._cancelling = False
        # A Ctrl-C that cancelled this turn does not make the next one quit.
        self._last_interrupt = -math.inf

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
                callbacks: Callbacks = {
                    "on_event": self._printer(number),
                    "on_approval": self._ask_approval,
                    "on_question": self._ask_question,
                }
                outcome = await call(callbacks)
                if number == self._current:
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
            self._launch(tg, lambda callbacks: session.steer(text, **callbacks))
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
        if outcome.plan is not None and (outcome.mode is not None or outcome.plan.status == "draft"):
            self._show_plan(outcome.plan)

    def _show_plan(self, plan: Plan) -> None:
        marks = {"completed": "x", "in_progress": "~"}
        self.term.line(f"plan (revision {plan.revision}, {plan.status}):", "bold")
        for number, todo in enumerate(plan.todos, start=1):
            mark = marks.get(str(todo.get("status")), " ")
            self.term.line(f"  {number}. [{mark}] {todo.get('content', '')}")
        if plan.status == "draft":
            self.term.note(
                "/execute approves it and lets the agent act; a message revises it; /discard drops it"
            )

    # ------------------------------------------------------------------ approvals and questions

    async def _ask_approval(self, interrupt: Interrupt) -> ApprovalVerdict:
        arguments = json.dumps(interrupt.arguments or {}, ensure_ascii=False)
        text = (
            f"{self.agent} wants to call {interrupt.tool} ({interrupt.effect}) with {arguments}. "
            "Allow? [y/n, or n REASON]"
        )
        while True:
            line = await self._ask(text)
            if line is None:
                return None
            word, _, reason = line.partition(" ")
            if word.lower() in ("y", "yes"):
                return True
            if word.lower() in ("n", "no"):
                return Reject(reason.strip()) if reason.strip() else False
            self.term.error("answer y or n (n REASON tells the agent why)")

    async def _ask_question(self, interrupt: Interrupt) -> QuestionVerdict:
        text = interrupt.question or "The agent asks a question."
        if interrupt.choices:
            text += "  " + "  ".join(f"{n}) {c}" for n, c in enumerate(interrupt.choices, start=1))
        text += "  [/decline to decline]"
        while True:
            line = await self._ask(text)
            if line is None:
                return None
            if line == "/decline":
                return Decline()
            answer = line
            if line.isdigit() and 1 <= int(line) <= len(interrupt.choices):
                answer = interrupt.choices[int(line) - 1]
            if interrupt.choices and not interrupt.allows_free_text and answer not in interrupt.choices:
                self.term.error("answer with one of: " + ", ".join(interrupt.choices))
            elif answer:
                return answer
            else:
                self.term.error("type an answer (or /decline)")

    async def _ask(self, text: str) -> str | None:
        """Put `text` to the person and return their line; None when the input ended, or when they
        cancel the turn (/cancel, Ctrl-C): the question then stays pending and the turn is ended."""
        if self._cancelling:
            return None
        self.term.line(text, "bold")
        line: str | None
        if self._queued:
            line = self._queued.pop(0)  # typed while the turn ran
        elif self._eof:
            return None
        else:
            send, receive = anyio.create_memory_object_stream[str | None](1)
            self._answer = send
            self.term.prompt("> ")
            try:
                with receive:
                    line = await receive.receive()
            except anyio.EndOfStream:
                line = None  # the turn is being cancelled
            finally:
                self._answer = None
        if line is not None and not self.term.styled:
            self.term.line(f"you: {line}")
        line = line.strip() if line is not None else None
        if line in ("/cancel", "/quit", "/exit"):
            self._cancel()
            return None
        return line

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
                await self._turn(lambda callbacks: session.cancel())
        elif word == "/steer" and rest:
            self.term.note("nothing is running: sending it as a message")
            self._queued.insert(0, rest)
        elif word == "/plan":
            await (self._send(rest, plan=True) if rest else self._read_plan())
        elif word in ("/execute", "/discard"):
            await self._plan_command(word)
        else:
            return False
        return True

    async def _read_plan(self) -> None:
        session = self.session
        if session is None:
            self.term.note("no session yet: /plan TEXT starts one with a planning turn")
            return
        try:
            plan = (await session.state(messages_limit=1)).plan
        except ClientError as exc:
            self.term.error(str(exc))
            return
        if plan is None:
            self.term.note("this session has no plan (/plan TEXT asks the agent for one)")
        else:
            self._show_plan(plan)

    async def _plan_command(self, word: str) -> None:
        """/execute: approve the draft shown (its revision) and follow the executing turn;
        /discard: drop it. A refusal (the plan moved on, no draft) is shown and changes nothing."""
        session = self.session
        plan = session.plan if session is not None else None
        if session is None or plan is None or plan.status != "draft":
            self.term.note("no draft plan to " + ("approve" if word == "/execute" else "discard"))
            return
        if word == "/execute":
            revision = plan.revision
            await self._turn(lambda callbacks: session.execute_plan(revision, **callbacks))
            return
        try:
            await session.discard_plan()
        except ClientError as exc:
            self.term.error(exc.text if isinstance(exc, ToolError) else str(exc))
            return
        self.term.note("the draft plan was discarded; your next message is an ordinary turn")

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

    async def _resume(self, session_id: str) -> bool:
        try:
            session = await self.p.resume(session_id)
        except ClientError as exc:
            self.term.error(str(exc))
            return False
        self.session, self.agent = session, session.agent
        last = session.last
        self.term.note(
            f"resumed session {session.id} with {session.agent}"
            + (f"; its last turn: {last.status}" if last else "")
        )
        if last is not None and not last.is_at_rest:
            await self._turn(lambda callbacks: session.wait(**callbacks))
        return True

    async def _choose_agent(self) -> bool:
        try:
            agents = (await self.p.agents()).agents
        except ClientError as exc:
            self.term.error(str(exc))
            return False
        names = [a.name for a in agents]
        self._plan_modes = {a.name: a.plan_mode for a in agents}
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
        """Cancel the running turn. The cancel becomes the turn call shown: its outcome says how the
        turn ended, and the call it interrupts returns unseen."""
        session, turn_calls = self.session, self._turn_calls
        if session is None or turn_calls is None:
            return
        if say:
            self.term.note("cancelling the turn")
        self._cancelling = True
        if self._answer is not None:
            self._answer.close()  # an open question goes unanswered: the turn is ending
        self._launch(turn_calls, lambda callbacks: session.cancel())

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
    terminal = Terminal()
    connect: AbstractAsyncContextManager[Parley]
    if args.url:
        token = args.token or (os.environ.get(args.token_env) if args.token_env else None)
        connect = connect_http(args.url, token, options=AS_PERSON)
    else:
        # The server's own log would interleave with the conversation: errors only.
        connect = connect_stdio(args.config, args.db, log_level="ERROR", options=AS_PERSON)
    return anyio.run(run_chat, connect, args.agent, args.session, terminal)
