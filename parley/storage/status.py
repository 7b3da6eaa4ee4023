"""What a backend says about its database for /healthz."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from parley.errors import StorageUnavailable

# How commits reach the disk (storage.synchronous): "full", each one before the call returns;
# "normal", later (SQLite: at WAL checkpoints; PostgreSQL: synchronous_commit off), so a crash of
# parley loses nothing and a crash of the machine or the database server may lose the last
# commits, except those marked durable, which are always synced first.
Synchronous = Literal["normal", "full"]


@dataclass(frozen=True, slots=True)
class StorageStatus:
    """`condition`: "ok", or how the latest write failed ("full", "read_only", "busy",
    "unreachable", "error: ..."). `reachable`: False while the database cannot be reached at all
    (/healthz answers 503 then). `details`: the `database` entry of /healthz, for backends that
    have more to say than the condition (PostgreSQL: schema version, pool)."""

    condition: str
    reachable: bool = True
    details: dict[str, Any] | None = field(default=None)


class StorageHealth:
    """How the latest write ended, for /healthz: "ok", "full", "read_only", "busy", "unreachable"
    or "error: <the database's message>". It turns back to "ok" with the next write that commits."""

    def __init__(self) -> None:
        self.status = "ok"

    def record(self, failure: StorageUnavailable | None) -> None:
        if failure is None:
            self.status = "ok"
        elif failure.condition == "error":
            self.status = f"error: {failure.detail}"
        else:
            self.status = failure.condition
