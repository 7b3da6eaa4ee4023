"""Testing agents and parley itself: the whole server in your test's process, a scripted model,
real MCP tool servers with the annotations you choose, a clock you move, fault points, and waits
on committed state with one deadline. See docs/testing.md ("Testing your agents").

    async with ToolServer().serve() as tools, parley_app({...}, model=ScriptedModel([...])) as parley:
        async with parley.mcp() as client:
            started = await call(client, "start_session", agent="helper", message="hi")
"""

from parley.runtime.faults import POINTS as FAULT_POINTS
from parley.runtime.faults import FaultPoints
from parley.testing.app import FAST_RUNTIME, HttpEndpoint, ParleyUnderTest, parley_app, write_config
from parley.testing.clock import ManualClock
from parley.testing.model import HeldModel, Hold, Reply, ScriptedModel, calls_tool, reply
from parley.testing.process import crash_at
from parley.testing.tools import ToolCall, ToolServer
from parley.testing.waiting import CALL_DEADLINE_S, DEADLINE_S, call, call_error, eventually

__all__ = [
    "CALL_DEADLINE_S",
    "DEADLINE_S",
    "FAST_RUNTIME",
    "FAULT_POINTS",
    "FaultPoints",
    "HeldModel",
    "Hold",
    "HttpEndpoint",
    "ManualClock",
    "ParleyUnderTest",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "ToolServer",
    "call",
    "call_error",
    "calls_tool",
    "crash_at",
    "eventually",
    "parley_app",
    "reply",
    "write_config",
]
