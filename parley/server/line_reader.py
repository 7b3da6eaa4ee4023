"""Splitting a byte stream into capped lines in linear time (sans-I/O: feed bytes, get lines).

Only the unfinished tail of the stream is kept, and each chunk is scanned once for newlines,
so a line of n bytes costs O(n) however it is chunked. A line longer than the cap is not
kept: its first and last few KiB are, so the request id can still be recovered from it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Enough of an oversized line to find the top-level "id" serializers put first (or last).
OVERSIZED_HEAD_BYTES = 64 * 1024
OVERSIZED_TAIL_BYTES = 4 * 1024


@dataclass(frozen=True, slots=True)
class Line:
    data: bytes


@dataclass(frozen=True, slots=True)
class OversizedLine:
    """A line over the cap: its length, and its head and tail for recovering the request id."""

    size: int
    head: bytes
    tail: bytes


class LineSplitter:
    def __init__(self, max_line_bytes: int) -> None:
        self._max = max_line_bytes
        self._partial = bytearray()
        # Set once the current line has passed the cap: from then on only its ends are kept.
        self._oversized_size: int | None = None
        self._tail = b""

    def feed(self, chunk: bytes) -> list[Line | OversizedLine]:
        lines: list[Line | OversizedLine] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._extend(chunk[start:end])
            lines.append(self._finish())
            start = end + 1
        self._extend(chunk[start:])
        return lines

    def end(self) -> list[Line | OversizedLine]:
        """The last line of a stream that did not end with a newline, if any."""
        if self._partial or self._oversized_size is not None:
            return [self._finish()]
        return []

    def _extend(self, piece: bytes) -> None:
        if not piece:
            return
        if self._oversized_size is None and len(self._partial) + len(piece) <= self._max:
            self._partial += piece
            return
        if self._oversized_size is None:
            self._oversized_size = len(self._partial)
            self._partial += piece[: max(0, OVERSIZED_HEAD_BYTES - len(self._partial))]
            del self._partial[OVERSIZED_HEAD_BYTES:]
        self._oversized_size += len(piece)
        self._tail = (self._tail + piece[-OVERSIZED_TAIL_BYTES:])[-OVERSIZED_TAIL_BYTES:]

    def _finish(self) -> Line | OversizedLine:
        line: Line | OversizedLine
        if self._oversized_size is None:
            line = Line(bytes(self._partial))
        else:
            line = OversizedLine(self._oversized_size, bytes(self._partial), self._tail)
        self._partial = bytearray()
        self._oversized_size = None
        self._tail = b""
        return line
