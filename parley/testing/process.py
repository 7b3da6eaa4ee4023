"""A real parley process that dies at a fault point, for crash tests: what happens to a tool
call when parley is killed between running it and recording its result can only be seen in a
process that really dies. Start one on your parley.yaml, let it die, then open the same database
with `parley_app` and check what the next process does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from parley.testing.waiting import DEADLINE_S

_PROTOCOL = "2025-06-18"


async def crash_at(
    config: Path,
    fault: str,
    *,
    agent: str,
    message: str,
    db: Path | str | None = None,
    then: Sequence[tuple[str, dict[str, Any]]] = (),
) -> str:
    """Run `parley serve` on `config` (python -m parley.testing.serve) with `fault` armed
    (`POINT[:TEXT]`, e.g. `tool_ran:charge`), start a session of `agent` with `message`, and wait
    until the process kills itself there. With `then`, the first turn is waited for, and these
    tool calls (name, arguments; the session's id is added) follow one by one until the process
    dies. Returns the session's id; fails if the process exits any other way or does not reach
    the point within the deadline."""
    command = [
        sys.executable,
        "-m",
        "parley.testing.serve",
        "--fault",
        fault,
        "serve",
        "--config",
        str(config),
    ]
    command += ["--db", str(db)] if db is not None else []
    log = config.parent / "crashed.log"
    with log.open("ab") as stderr:
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
    async with process:
        assert process.stdin is not None and process.stdout is not None
        lines = _Lines(process.stdout)
        await _send(process.stdin, _request(1, "initialize", _initialize()))
        await lines.answer(1)
        await _send(process.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        arguments: dict[str, Any] = {"agent": agent, "message": message}
        arguments["wait_seconds"] = DEADLINE_S if then else 0
        await _send(
            process.stdin, _request(2, "tools/call", {"name": "start_session", "arguments": arguments})
        )
        started = await lines.answer(2)
        session_id = str(started["result"]["structuredContent"]["session_id"])
        for request_id, (tool, args) in enumerate(then, start=3):
            call = {"name": tool, "arguments": {**args, "session_id": session_id}}
            await _send(process.stdin, _request(request_id, "tools/call", call))
            if request_id < len(then) + 2:
                await lines.answer(request_id)
        with anyio.fail_after(DEADLINE_S):
            code = await process.wait()
    if code != -9:
        raise AssertionError(f"parley exited with {code}, not at the fault point {fault}:\n{log.read_text()}")
    return session_id


class _Lines:
    def __init__(self, stdout: Any) -> None:
        self._stdout = stdout
        self._buffer = b""

    async def answer(self, request_id: int) -> dict[str, Any]:
        """The answer to request `request_id`, skipping notifications and other messages."""
        with anyio.fail_after(DEADLINE_S):
            while True:
                while b"\n" not in self._buffer:
                    self._buffer += await self._stdout.receive()
                line, _, self._buffer = self._buffer.partition(b"\n")
                message = json.loads(line)
                if message.get("id") == request_id:
                    if "error" in message:
                        raise AssertionError(f"parley refused the request: {message['error']}")
                    return dict(message)


def _request(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _initialize() -> dict[str, Any]:
    return {
        "protocolVersion": _PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "crash-test", "version": "0"},
    }


async def _send(stdin: Any, message: dict[str, Any]) -> None:
    await stdin.send((json.dumps(message) + "\n").encode())
