"""Where a resumed `GET /v1/events` goes on: the `id:` of its frames.

The owner-wide stream follows many sessions, each with its own event numbers, so its position is
all of them: `o1.<ms>.<hex>-<seq>_<hex>-<seq>...`, the time the frame was sent and, for each
session the stream follows, the last event it sent (`<hex>` is the session id without `ses_`). A
client that reconnects with it as `Last-Event-ID` gets every event after those positions, then live
ones; sessions it did not follow are looked at for events since that time. A stream that follows
more than `MAX_SESSIONS` sessions sends an empty `id:` (a client that reconnects then gets a new
snapshot), so the header stays small.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from parley.core.ids import SessionId
from parley.server.v1_common import BadRequest

# Sessions a position names at most (each takes about 40 characters of the header).
MAX_SESSIONS = 100
_PREFIX = "o1"
_ENTRY = re.compile(r"([0-9a-f]{32})-([0-9]{1,18})")
_TIME = re.compile(r"[0-9]{1,16}")


@dataclass(frozen=True, slots=True)
class OwnerPosition:
    """When the frame was sent (seconds), and the last event sent of each session followed."""

    at: float
    seqs: dict[SessionId, int]


def encode(at: float, seqs: dict[SessionId, int]) -> str:
    """The `id:` of a frame sent at `at` (empty: too many sessions to name)."""
    if len(seqs) > MAX_SESSIONS:
        return ""
    entries = "_".join(f"{sid.removeprefix('ses_')}-{seq}" for sid, seq in sorted(seqs.items()))
    return f"{_PREFIX}.{int(at * 1000)}.{entries}"


def decode(raw: str | None) -> OwnerPosition | None:
    """`Last-Event-ID` as a position (None: none sent, so the stream opens with a snapshot)."""
    if not raw:
        return None
    parts = raw.split(".")
    if len(parts) != 3 or parts[0] != _PREFIX or not _TIME.fullmatch(parts[1]):
        raise _refused(raw)
    seqs: dict[SessionId, int] = {}
    for entry in parts[2].split("_") if parts[2] else []:
        match = _ENTRY.fullmatch(entry)
        if match is None or len(seqs) >= MAX_SESSIONS:
            raise _refused(raw)
        seqs[SessionId("ses_" + match.group(1))] = int(match.group(2))
    return OwnerPosition(int(parts[1]) / 1000, seqs)


def _refused(raw: str) -> BadRequest:
    return BadRequest(
        "Last-Event-ID must be the id of an event this stream sent (it starts with 'o1.'), or be left "
        f"out to start with a snapshot; got {raw[:40]!r}"
    )
