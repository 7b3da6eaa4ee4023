"""Text in a JSON body that no UTF-8 can hold: JSON's `\\ud800` escape makes a lone surrogate, which
Python's parser accepts and every later step (a digest, the database, the JSON answer that names
it) refuses with a 500. /v1 refuses it at the door instead, naming where it is."""

from __future__ import annotations

from typing import Any

from parley.server.v1_common import BadRequest


def check_unicode(body: dict[str, Any]) -> None:
    """Refuse a body with a string UTF-8 cannot hold (a key too), naming where it is. A loop, not
    recursion: the body may nest as deep as the JSON parser allowed."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        field, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                path = f"{field}.{key}" if field else str(key)
                stack += [(path, key), (path, item)]
        elif isinstance(value, list):
            stack += [(f"{field}[{index}]", item) for index, item in enumerate(value)]
        elif isinstance(value, str) and not encodable(value):
            # The field's name may hold the surrogate itself: name it with the escape.
            where = field.encode("utf-8", "backslashreplace").decode()
            raise BadRequest(
                f"'{where}' has a lone surrogate (an unpaired \\ud800-\\udfff escape); send valid Unicode"
            )


def encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
