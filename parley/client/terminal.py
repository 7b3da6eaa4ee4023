"""The terminal side of `parley chat`: lines in, styled text out.

Lines are read by a daemon thread (a blocked read must not keep the process alive at exit, and
works the same on a terminal, a pipe or a file), handed to the event loop through a memory
stream. Output is coloured only when stdout is a terminal; otherwise it is plain text with the
same words, so a transcript can be piped or logged.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

_RESET = "\033[0m"
_STYLES = {"bold": "\033[1m", "dim": "\033[2m", "red": "\033[31m", "green": "\033[32m", "cyan": "\033[36m"}


class Terminal:
    """Where the chat writes; `styled` when stdout is a terminal."""

    def __init__(self, out: TextIO | None = None, *, styled: bool | None = None) -> None:
        self.out = out or sys.stdout
        self.styled = self.out.isatty() if styled is None else styled
        self._mid_line = False  # streamed text left the cursor after some text

    def _style(self, text: str, *names: str) -> str:
        if not self.styled or not names:
            return text
        return "".join(_STYLES[n] for n in names) + text + _RESET

    def line(self, text: str = "", *styles: str) -> None:
        self.end_stream()
        self.out.write(self._style(text, *styles) + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """A line about what happens (tool calls, status), set apart from the conversation."""
        self.line(f"  · {text}" if self.styled else f"[{text}]", "dim")

    def error(self, text: str) -> None:
        self.line(f"error: {text}", "red")

    def stream(self, text: str, label: str) -> None:
        """Text as the agent produces it, continuing the current line."""
        if not self._mid_line:
            self.out.write(self._style(f"{label}: ", "bold", "cyan"))
        self.out.write(text)
        self.out.flush()
        self._mid_line = not text.endswith("\n")

    def end_stream(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False

    def prompt(self, text: str) -> None:
        """The prompt for the next line; only on a terminal (a pipe gets no prompts)."""
        self.end_stream()
        if self.styled:
            self.out.write(self._style(text, "bold"))
            self.out.flush()


class LineReader:
    """Lines of stdin as an async stream; None at the end of input."""

    def __init__(self, source: TextIO | None = None) -> None:
        self._source = source or sys.stdin
        send, receive = anyio.create_memory_object_stream[str | None](100)
        self._send: MemoryObjectSendStream[str | None] = send
        self.lines: MemoryObjectReceiveStream[str | None] = receive

    def start(self) -> None:
        token = anyio.lowlevel.current_token()

        def read() -> None:
            try:
                while True:
                    line = self._source.readline()
                    anyio.from_thread.run(self._send.send, line.rstrip("\n") if line else None, token=token)
                    if not line:
                        return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError):
                return  # the chat is over (its loop is closed)

        threading.Thread(target=read, name="parley-chat-input", daemon=True).start()

    async def next(self) -> str | None:
        try:
            return await self.lines.receive()
        except anyio.EndOfStream:
            return None
