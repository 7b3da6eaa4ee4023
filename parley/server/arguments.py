"""How tool arguments are read: strictly, text exactly as sent, and with errors that name the
field, what it must be, and what was sent instead."""

from __future__ import annotations

import json
import typing
from typing import Any

from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from pydantic import ValidationError

# What a field must be, by pydantic error type, phrased as the fix.
_EXPECTED = {
    "int_type": "a whole number such as 20 (a JSON number, not quoted, not true/false)",
    "float_type": "a number such as 5 (a JSON number, not quoted, not true/false)",
    "bool_type": "true or false (a JSON boolean, not quoted, not 0 or 1)",
    "string_type": "a string (text in double quotes)",
    "dict_type": "an object such as {...}",
    "model_type": "an object such as {...}",
    "list_type": "a list such as [...]",
    "finite_number": "a finite number",
}
_BOUNDS = {
    "less_than_equal": ("le", "at most"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "greater_than": ("gt", "more than"),
}
SHOWN_CHARS = 40


class TextAsSentMetadata(FuncMetadata):
    """The SDK parses a JSON-looking string argument before validation (some clients send lists
    and objects as strings). For text that turned the message "null" into no message at all and
    '["a"]' into a list; so only fields that take an object or a list get it, and only when the
    string holds one."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = dict(data)
        for key, value in data.items():
            field = self.arg_model.model_fields.get(key)
            if field is None or not isinstance(value, str) or not _takes_containers(field.annotation):
                continue
            try:
                loaded = json.loads(value)
            except (ValueError, RecursionError):
                continue
            if isinstance(loaded, dict | list):
                parsed[key] = loaded
        return parsed


def _takes_containers(annotation: Any) -> bool:
    if typing.get_origin(annotation) in (dict, list):
        return True
    return any(_takes_containers(arg) for arg in typing.get_args(annotation))


def argument_errors(tool: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        if err["type"] == "missing":
            problems.append(f"'{field}' is required")
        elif err["type"] in _EXPECTED:
            problems.append(f"'{field}' must be {_EXPECTED[err['type']]}; got {shown(err['input'])}")
        elif err["type"] in _BOUNDS:
            bound, word = _BOUNDS[err["type"]]
            limit = (err.get("ctx") or {}).get(bound)
            problems.append(f"'{field}' must be {word} {limit}; got {shown(err['input'])}")
        else:
            problems.append(f"'{field}': {err['msg']} (got {shown(err['input'])})")
    return f"Invalid arguments for {tool}: " + "; ".join(problems) + ". Fix them and call again."


def shown(value: Any) -> str:
    """A value as JSON, cut short: enough to see what was sent, never a whole document."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=str)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
