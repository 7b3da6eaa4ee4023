"""What a backend says about its database for /healthz."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class StorageStatus:
    """`condition`: "ok", or how the latest write failed ("full", "read_only", "busy",
    "unreachable", "error: ..."). `reachable`: False while the database cannot be reached at all
    (/healthz answers 503 then). `details`: the `database` entry of /healthz, for backends that
    have more to say than the condition (PostgreSQL: schema version, pool)."""

    condition: str
    reachable: bool = True
    details: dict[str, Any] | None = field(default=None)
