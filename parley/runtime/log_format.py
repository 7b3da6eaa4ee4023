"""`parley serve --log-format json`: one JSON object per line on stderr, for log pipelines.

Each line has `time` (ISO 8601, UTC), `level`, `logger` and `message`, plus what the record is
about when it says so: `session_id` and `owner` (records made with `extra=about(session)`),
`turn_id` and `tool_call_id` (records that pass them in `extra`), and `trace_id` / `span_id` of
the span current when the record was made (only when tracing is on). Exceptions go in `error`.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from opentelemetry import trace

from parley.runtime.session_log import OWNER_ATTR, SESSION_ATTR

# Record attributes copied into the line, by their name there.
_IDS = {SESSION_ATTR: "session_id", OWNER_ATTR: "owner", "turn_id": "turn_id", "tool_call_id": "tool_call_id"}


class JsonLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for attr, key in _IDS.items():
            value = getattr(record, attr, None)
            if value is not None:
                line[key] = str(value)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def library_log_levels(level: int) -> dict[str, int]:
    """Set the levels of the libraries' loggers that parley's log at `level` keeps quieter, and
    return what they were (so a test that ran parley in its process can put them back)."""
    levels = {
        # The database driver's DEBUG lines may show statements with their parameters (users'
        # messages) and connection details: not in parley's log, whatever its level.
        "psycopg": logging.INFO,
        # The pool logs every connection checkout and return at INFO, several lines a second while
        # idle: only its warnings (a connection lost, a pool exhausted) are worth a line.
        "psycopg.pool": logging.WARNING,
    }
    if level != logging.DEBUG:
        # httpx2 writes a line per request at INFO (each model call): parley logs what a call did
        # and why one failed, so those lines come only with --log-level DEBUG (~3% of a turn's CPU).
        levels["httpx2"] = logging.WARNING
    before = {name: logging.getLogger(name).level for name in levels}
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)
    return before
