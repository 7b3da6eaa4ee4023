"""Titles and tags: what people name sessions and find them by. The rules for a title or a tag
given by a caller, the title proposed from a session's first message (no model call: its first
words), the narrowing list_sessions takes (title text, tag, a creation time range), and times
as shown to callers and read back from them."""

from __future__ import annotations

import math
import re
import time
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime

from parley.core.records import SessionFilter
from parley.errors import InvalidArgument
from parley.runtime.text import NO_VISIBLE_TEXT, has_visible_text

TITLE_MAX_CHARS = 200
TAGS_MAX = 20
TAG_MAX_CHARS = 40
# Letters and digits first, then also . _ : / - (no spaces): a tag is typed in a filter and a URL.
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*")
TAG_RULE = (
    f"a tag is 1 to {TAG_MAX_CHARS} characters: ASCII letters and digits, then also . _ : / - "
    '(no spaces), e.g. "work" or "project:alpha"'
)
# A proposed title: the first words of the first message, at most this many of each.
PROPOSED_WORDS = 8
PROPOSED_CHARS = 60


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def check_title(title: str) -> str | None:
    """A caller's title as stored: surrounding spaces removed; "" clears it (None)."""
    title = title.strip()
    if not title:
        return None
    if not has_visible_text(title):
        raise InvalidArgument("title", f'{NO_VISIBLE_TEXT}; give a short name, or "" to clear it')
    if _has_control(title):
        raise InvalidArgument("title", "has a line break or another control character; give one line of text")
    if len(title) > TITLE_MAX_CHARS:
        raise InvalidArgument("title", f"is {len(title)} characters long; the limit is {TITLE_MAX_CHARS}")
    return title


def check_tag(tag: str, field: str = "tags") -> str:
    if len(tag) > TAG_MAX_CHARS or not TAG_PATTERN.fullmatch(tag):
        raise InvalidArgument(field, f"{tag[: TAG_MAX_CHARS + 5]!r} is not a tag: {TAG_RULE}")
    return tag


def check_tags(tags: Sequence[str]) -> list[str]:
    """A caller's tags as stored: each checked, duplicates dropped, first seen order kept."""
    kept = list(dict.fromkeys(check_tag(t) for t in tags))
    if len(kept) > TAGS_MAX:
        raise InvalidArgument("tags", f"has {len(kept)} tags; a session carries at most {TAGS_MAX}")
    return kept


# A line the demo model (and people testing with it) reads as a directive.
_DIRECTIVE = re.compile(r"\s*/[a-z]+(\s|$)")


# What opens a request without saying what it is about (English): a greeting, then courtesies.
_COURTESIES = (
    r"(please|kindly|(can|could|would|will) you( please)?|i('d| would) like you to|i (want|need) you to|"
    r"(can|could) (i|we) (ask you to|get you to)|help me( to)?|i need help( with)?)\b"
)
_COURTESY = re.compile(_COURTESIES + r"[\s,]*", re.I)
# A greeting ends with punctuation, or a courtesy follows it ("hello from the page" is no greeting).
_GREETING = re.compile(
    r"(hi|hello|hey|good (morning|afternoon|evening)|dear \w+)\b(\s*[,!.:;-]+\s*|\s+(?="
    + _COURTESIES
    + r"))",
    re.I,
)
_ASKED = re.compile(r"(can|could|would|will) you\b", re.I)
_SENTENCE_END = re.compile(r"(?<=\w)[.?!](\s|$)")


def _gist(text: str) -> str:
    """The request itself: without a greeting and courtesies before it ("Hi, could you please
    plan a trip" -> "Plan a trip"), its first sentence, capitalised. Whatever would be left
    empty is kept as it was."""
    gist = text.strip()
    asked = stripped = False
    for pattern in (_GREETING, _COURTESY, _COURTESY):
        found = pattern.match(gist)
        if found and re.search(r"\w", gist[found.end() :]):
            asked = asked or bool(_ASKED.match(found.group(0)))
            gist, stripped = gist[found.end() :].strip(), True
    end = _SENTENCE_END.search(gist)
    if end and len(gist[: end.start()].split()) >= 2:
        gist = gist[: end.start()] + ("" if asked or gist[end.start()] == "." else gist[end.start()])
    elif asked:
        gist = gist.rstrip("?").rstrip()
    return gist[:1].upper() + gist[1:] if stripped and gist[:1].islower() else gist


def proposed_title(message: str | None) -> str | None:
    """The title a session gets from its first message when nobody gave it one: what it asks for
    (`_gist`) in its first words (control characters and runs of spaces made single spaces),
    shortened with an ellipsis. Lines that are directives (`/tool ...`, `/fail 2`: a slash, a word,
    then a space or the end) are no title: a message of directives only gets none."""
    if message is None:
        return None
    message = "\n".join(line for line in message.splitlines() if not _DIRECTIVE.match(line))
    flat = "".join(" " if unicodedata.category(ch)[0] in "CZ" else ch for ch in message)
    words = _gist(flat).split()
    if not words or not has_visible_text(" ".join(words)):
        return None
    title = " ".join(words[:PROPOSED_WORDS])
    if len(title) > PROPOSED_CHARS:
        title = title[: PROPOSED_CHARS - 1].rstrip() + "…"
    elif len(words) > PROPOSED_WORDS:
        title += " …"
    return title


def format_time(ts: float) -> str:
    """`ts` (seconds since the epoch) in ISO 8601, UTC, to the millisecond it falls in, never a
    later one: `parse_time` of it is at most `ts`. So a time shown is a bound that holds:
    created_after=<a session's created_at> lists that session and created_before=<it> does not.
    (datetime.fromtimestamp rounds to the microsecond before isoformat cuts to the millisecond,
    which shows a time up to half a microsecond before a millisecond as that millisecond.)"""
    ms = math.floor(ts * 1000)
    # The product is rounded too: step to the last millisecond that parse_time reads as <= ts.
    if ms / 1000 > ts:
        ms -= 1
    elif (ms + 1) / 1000 <= ts:
        ms += 1
    seconds, millis = divmod(ms, 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"


def parse_time(field: str, value: str) -> float:
    """An ISO 8601 date or date-time ("2026-11-30", "2026-11-30T12:00:00Z"; UTC when no offset is
    given) as seconds since the epoch."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidArgument(
            field,
            f"{value[:40]!r} is not an ISO 8601 date or time; write e.g. 2026-11-30 or 2026-11-30T12:00:00Z",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def session_filter(
    title: str | None, tag: str | None, created_after: str | None, created_before: str | None
) -> SessionFilter | None:
    """list_sessions' narrowing from a caller's arguments (None: nothing to narrow by)."""
    if title is not None and (not title.strip() or len(title) > TITLE_MAX_CHARS):
        raise InvalidArgument("title", f"must be 1 to {TITLE_MAX_CHARS} characters of the title to look for")
    if tag is not None:
        check_tag(tag, "tag")
    start = parse_time("created_after", created_after) if created_after is not None else None
    end = parse_time("created_before", created_before) if created_before is not None else None
    if start is not None and end is not None and start >= end:
        raise InvalidArgument("created_before", "must be later than created_after")
    if title is None and tag is None and start is None and end is None:
        return None
    return SessionFilter(
        title=title.strip() if title is not None else None, tag=tag, created_from=start, created_before=end
    )
