"""Tests of the `refunds` agent (agents/refunds.md) with parley.testing: a scripted model, the
shop's tools served in-process with their real annotations, and parley itself in this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.testing import (
    ScriptedModel,
    ToolServer,
    call,
    calls_tool,
    crash_at,
    parley_app,
    reply,
    write_config,
)

pytestmark = pytest.mark.anyio
AGENTS = Path(__file__).parent / "agents"


def shop_tools() -> ToolServer:
    """The shop's MCP tools as the agent sees them: one that reads, one that moves money."""
    shop = ToolServer("shop")

    @shop.tool(read_only=True)
    async def find_order(order: str) -> str:
        """Look an order up."""
        return f"order {order}: 2 books, paid 3400 cents"

    @shop.tool(destructive=True)
    async def refund(order: str, cents: int) -> str:
        """Refund an order (money leaves the shop: a person approves it first)."""
        return f"refunded {cents} cents on {order}"

    return shop


async def test_a_refund_runs_only_after_a_person_approves_it(tmp_path: Path) -> None:
    shop = shop_tools()
    model = ScriptedModel(
        [
            calls_tool("shop__find_order", {"order": "A-17"}),
            calls_tool("shop__refund", {"order": "A-17", "cents": 3400}),
            reply("Refunded 3400 cents on order A-17."),
        ]
    )
    async with shop.serve():
        config = {"agents_dir": str(AGENTS), "mcp_servers": {"shop": shop.entry}}
        async with parley_app(config, model=model, directory=tmp_path) as parley, parley.mcp() as client:
            asked = await call(client, "start_session", agent="refunds", message="Refund order A-17, please.")
            # The lookup only reads, so it ran; the refund waits for a person.
            assert asked["status"] == "waiting_for_input"
            [approval] = asked["pending"]
            assert approval["tool"] == "shop__refund" and approval["arguments"] == {
                "order": "A-17",
                "cents": 3400,
            }
            assert [c.tool for c in shop.calls] == ["find_order"]

            decision = {"interrupt_id": approval["id"], "approved": True}
            done = await call(client, "approve", session_id=asked["session_id"], decisions=[decision])
            transcript = await call(client, "get_session", session_id=asked["session_id"])

    assert done["status"] == "answered"
    assert done["answer"] == "Refunded 3400 cents on order A-17."
    [refund] = shop.ran("refund")
    assert refund.arguments == {"order": "A-17", "cents": 3400}
    assert [m["role"] for m in transcript["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    # What the model read back: the tool's own words.
    assert model.requests[2].messages[-1].text == "refunded 3400 cents on A-17"
    model.assert_complete()


@pytest.mark.e2e  # it starts a process: parley's own suite keeps such tests out of its fast layer
async def test_a_refund_cut_by_a_crash_is_never_sent_twice(tmp_path: Path) -> None:
    """parley dies right after the refund ran and before its result was stored. The next
    process must not refund again: the call may have taken effect, and the model is told so."""
    shop = shop_tools()
    async with shop.serve():
        config = write_config(tmp_path, {"agents_dir": str(AGENTS), "mcp_servers": {"shop": shop.entry}})
        # A real process dies at the fault point; it runs the keyless demo model, whose `/tool`
        # lines call tools.
        message = '/tool shop__refund {"order": "A-17", "cents": 3400}'
        session_id = await crash_at(config, "tool_ran:refund", agent="night-refunds", message=message)
        assert len(shop.ran("refund")) == 1, "the refund ran once before the crash"

        # The next process, on the same database, takes the turn over.
        async with parley_app(config) as parley, parley.mcp() as client:
            after = await call(client, "send_message", session_id=session_id, message="What happened?")
            transcript = await call(client, "get_session", session_id=session_id)

    assert len(shop.ran("refund")) == 1, "the next process did not refund again"
    [cut] = [m for m in transcript["messages"] if m["role"] == "tool"]
    assert cut["is_error"] and "may or may not have taken effect" in cut["text"], cut
    assert after["status"] == "answered"
