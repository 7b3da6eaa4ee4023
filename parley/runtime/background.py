"""How a background loop (scans, purges, watchers) says that one pass failed before it retries."""

from __future__ import annotations

import logging
import sys

from parley.errors import StorageError, StorageUnavailable


def log_pass_failure(log: logging.Logger, doing: str) -> None:
    """Log the exception being handled for a loop that tries again on its next pass.

    The database's condition (away, busy, restarting) is not a bug: the store has already said
    so once, so it is a debug line here; another storage error is one warning line; anything
    else is a bug and keeps its traceback."""
    exc = sys.exc_info()[1]
    if isinstance(exc, StorageUnavailable):
        log.debug("%s failed (%s); trying again later", doing, exc.condition)
    elif isinstance(exc, StorageError):
        log.warning("%s failed (%s); trying again later", doing, exc)
    else:
        log.exception("%s failed; trying again later", doing)
