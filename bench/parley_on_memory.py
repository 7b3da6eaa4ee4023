"""`parley serve` on the in-memory store instead of its database: a measuring device only.

Nothing is written anywhere and everything is lost with the process, so this is what parley's
engine costs without durability (no SQLite, no commits, no fsync): bench/what_it_costs.py sets
it beside the real server to show what the database costs. Never use it to serve anyone.

    .venv/bin/python bench/parley_on_memory.py serve --config parley.yaml [--http ...]
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import parley.app
import parley.stores
from parley.cli import main
from parley.config import ServerConfig
from parley.storage.memory import open_memory_store
from parley.storage.status import StorageStatus
from parley.stores import OpenedStore


@asynccontextmanager
async def open_store_in_memory(config: ServerConfig, origin: str = "") -> AsyncIterator[OpenedStore]:
    async with open_memory_store() as store:

        async def status() -> StorageStatus:
            return StorageStatus("ok")

        yield OpenedStore(store, "memory (bench only: nothing is kept)", status)


if __name__ == "__main__":
    # The composition root imported open_store by name: replace it where it is used.
    parley.app.open_store = open_store_in_memory  # type: ignore[assignment]
    parley.stores.open_store = open_store_in_memory  # type: ignore[assignment]
    sys.exit(main())
