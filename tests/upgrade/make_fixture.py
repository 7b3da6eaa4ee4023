"""Make tests/upgrade/wave1.db with the release of the day: a database at rest holding a parked
approval with a message queued behind it, a pending durable timer, a downstream MCP task being
polled, and an open MCP task (2025-11-25) waiting for an approval. Run once per release whose
database later releases must upgrade; commit the .db and .json it writes.

The timer and the first poll are due 60 s after the stop: enough to stop cleanly first, and
long past whenever the test runs.

    python -m tests.upgrade.make_fixture
"""

from __future__ import annotations

import json
import signal
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import anyio

from parley import __version__
from tests.support import ServerProcess, call, db_rows, eventually
from tests.task_client import call_tool_as_task, get_task, server_target, task_client
from tests.upgrade.world import DATABASE, HANDLES, TASK_TTL_MS, write_world

APPEND = '/tool fixture__append_note {"note": "%s"}'


async def make(directory: Path) -> dict[str, Any]:
    config = write_world(directory, poll_s=60)  # no poll of the downstream task before the stop
    db = directory / "parley.db"
    async with (
        ServerProcess(config) as server,
        task_client(server_target(server), mode="legacy", elicitation_callback=None) as (client, _),
    ):
        approval = await call(client, "start_session", agent="writer", message=APPEND % "approved later")
        assert approval["status"] == "waiting_for_input", approval
        queued = await call(
            client,
            "send_message",
            session_id=approval["session_id"],
            message="and this message waits behind the approval",
            wait_seconds=0,
        )
        assert queued["queued_message_id"], queued
        timer = await call(
            client, "start_session", agent="demo", message="/wait 60 for the upgrade", wait_seconds=0
        )
        downstream = await call(
            client,
            "start_session",
            agent="asker",
            message='/tool echo__ask {"question": "colour?"}',
            wait_seconds=0,
        )
        task = await call_tool_as_task(
            client, "start_session", {"agent": "writer", "message": APPEND % "task"}, ttl_ms=TASK_TTL_MS
        )

        async def at_rest() -> bool:
            rows = db_rows(db, "SELECT status FROM tool_calls")
            statuses = sorted(r[0] for r in rows)
            return statuses == [
                "pending_approval",
                "pending_approval",
                "waiting_for_task",
                "waiting_for_timer",
            ]

        await eventually(at_rest, "every session to park")

        async def task_waits() -> bool:
            return (await get_task(client, task["taskId"]))["status"] == "input_required"

        await eventually(task_waits, "the MCP task to wait for input")
        server.send_signal(signal.SIGTERM)
        assert await server.wait_exit() == 0
    return {
        "release": __version__,
        "approval_session": approval["session_id"],
        "queued_message_id": queued["queued_message_id"],
        "timer_session": timer["session_id"],
        "downstream_session": downstream["session_id"],
        "task_id": task["taskId"],
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        handles = anyio.run(make, directory)
        # One self-contained file: the WAL folded in.
        DATABASE.unlink(missing_ok=True)
        with sqlite3.connect(directory / "parley.db") as source, sqlite3.connect(DATABASE) as target:
            source.backup(target)
        schema = db_rows(DATABASE, "SELECT MAX(version) FROM schema_version")[0][0]
    HANDLES.write_text(json.dumps({**handles, "schema_version": schema}, indent=2) + "\n")
    print(f"wrote {DATABASE} (schema {schema}) and {HANDLES}")


if __name__ == "__main__":
    main()
