"""A send_message repeated with its client_message_id, through MCP on parley in this process:
the queueing's own transaction finds the first copy, before any fair use is counted, so the
repeat gets the same turn even when the sender has no budget left, and a different message under
the same id is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.testing import call, call_error, parley_app

pytestmark = pytest.mark.anyio


async def test_a_repeated_send_gets_its_turn_back_with_no_budget_left(tmp_path: Path) -> None:
    async with (
        parley_app({"limits": {"messages_per_minute": 2}}, directory=tmp_path) as parley,
        parley.mcp() as client,
    ):
        started = await call(client, "start_session", agent="demo", message="hello")  # 1 of 2
        sid = started["session_id"]
        first = await call(client, "send_message", session_id=sid, message="again", client_message_id="m-1")
        assert first["status"] == "answered"  # 2 of 2: the budget is spent

        again = await call(client, "send_message", session_id=sid, message="again", client_message_id="m-1")
        assert (again["turn_id"], again["status"], again["answer"]) == (
            first["turn_id"],
            "answered",
            first["answer"],
        )
        other = await call_error(
            client, "send_message", session_id=sid, message="else", client_message_id="m-1"
        )
        assert "was already used for a different message" in other
        assert "messages_per_minute" in await call_error(
            client, "send_message", session_id=sid, message="more"
        )
        session = await call(client, "get_session", session_id=sid)
        assert session["turn_count"] == 2, "the repeat started no turn"
