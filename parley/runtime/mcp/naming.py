"""Names the model sees for MCP tools: `<server>__<tool>`, safe for every model API."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
HASH_CHARS = 8


@dataclass(frozen=True, slots=True)
class NameCollision:
    name: str
    server: str
    tool: str
    renamed_to: str


def _digest(server: str, tool: str) -> str:
    return hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:HASH_CHARS]


def exposed_name(server: str, tool: str) -> str:
    """`server__tool` with unsafe characters as `_`; over 64 characters, cut with a stable hash suffix."""
    name = _UNSAFE.sub("_", f"{server}__{tool}")
    if len(name) > MAX_NAME:
        name = f"{name[: MAX_NAME - HASH_CHARS - 1]}_{_digest(server, tool)}"
    return name


def assign_names(
    tools: Iterable[tuple[str, str]], reserved: Iterable[str] = ()
) -> tuple[dict[tuple[str, str], str], list[NameCollision]]:
    """Exposed names for (server, tool) pairs. When two pairs sanitize to the same name, the pair
    that sorts first keeps it and the other gets a hash suffix: the same on every process and run."""
    taken = set(reserved)
    names: dict[tuple[str, str], str] = {}
    collisions: list[NameCollision] = []
    for server, tool in sorted(set(tools)):
        name = exposed_name(server, tool)
        if name in taken:
            base = name[: MAX_NAME - HASH_CHARS - 1]
            renamed = f"{base}_{_digest(server, tool)}"
            collisions.append(NameCollision(name=name, server=server, tool=tool, renamed_to=renamed))
            name = renamed
        taken.add(name)
        names[(server, tool)] = name
    return names, collisions
