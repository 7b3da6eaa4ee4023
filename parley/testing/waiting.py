"""Waiting on state with one deadline: a test never sleeps to let something happen, it waits
until the state it needs is there, and fails with what it waited for after the deadline."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client

# One deadline for every wait (a state to be reached, a process to start or exit), generous for
# subprocesses on 2 cores; PARLEY_TEST_DEADLINE changes it for a slower machine.
DEADLINE_S = float(os.environ.get("PARLEY_TEST_DEADLINE", "30"))
# A tool call may wait on the server up to the deadline, then needs the deadline again to return.
CALL_DEADLINE_S = 2 * DEADLINE_S


async def eventually(check: Callable[[], Awaitable[bool]], what: str, interval_s: float = 0.05) -> None:
    """Poll `check` until it is true; fail after the deadline, naming `what` was awaited."""
    try:
        with anyio.fail_after(DEADLINE_S):
            # The state is committed rows (perhaps by another process): there is no event to await.
            while not await check():  # noqa: ASYNC110
                await anyio.sleep(interval_s)
    except TimeoutError:
        raise AssertionError(f"timed out after {DEADLINE_S}s waiting for {what}") from None


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a parley tool that must succeed; return its structured content."""
    with anyio.fail_after(CALL_DEADLINE_S):
        result = await client.call_tool(tool, arguments)
    text = getattr(result.content[0], "text", "") if result.content else ""
    assert not result.is_error, f"{tool} failed: {text}"
    assert result.structured_content is not None, f"{tool} returned no structured content: {text}"
    return dict(result.structured_content)


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Call a parley tool that must be refused; return its error text."""
    with anyio.fail_after(CALL_DEADLINE_S):
        result = await client.call_tool(tool, arguments)
    text = getattr(result.content[0], "text", "") if result.content else ""
    assert result.is_error, f"{tool} should have been refused but returned: {text}"
    return str(text)
