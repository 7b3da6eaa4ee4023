"""Text for the generated reference pages: table cells and paragraphs that Markdown shows as
written, and values as YAML or JSON writes them."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

# Outside code spans: what Markdown would read as HTML, emphasis, a link or a cell's end.
_SPECIAL = re.compile(r"[<>&*\[\]|]")
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_ESCAPES = {"<": "&lt;", ">": "&gt;", "&": "&amp;", "*": r"\*", "[": r"\[", "]": r"\]", "|": r"\|"}


def prose(text: str) -> str:
    """`text` shown as written: code spans (`...`) kept, everything else escaped."""
    parts = _CODE_SPAN.split(text)
    return "".join(
        part if i % 2 else _SPECIAL.sub(lambda m: _ESCAPES[m.group(0)], part) for i, part in enumerate(parts)
    )


def cell(text: str) -> str:
    """`text` as one table cell: prose on one line."""
    return prose(" ".join(text.split()))


def code(text: str) -> str:
    """`text` as a code span (one that holds a backtick is fenced with two)."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def value(item: Any) -> str:
    """A value as YAML and JSON both read it: null, true, 0.5, "text", [1, 2], {}."""
    if isinstance(item, float) and item.is_integer():
        item = int(item)
    if isinstance(item, tuple):
        item = list(item)
    return json.dumps(item, ensure_ascii=False)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; the cells are already Markdown."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def anchor(*parts: str) -> str:
    """A heading id from names: lowercase letters, digits and -."""
    return "-".join(re.sub(r"[^a-z0-9]+", "-", part.lower()).strip("-") for part in parts)
