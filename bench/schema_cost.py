"""What parley's published tool contract costs an MCP client, beside the floor's: the work the mcp
SDK's client does with a server's tools that grows with their schemas.

The SDK's `Client`, at the first call of a tool in a client session, lists the tools (parsing the
whole listing) and checks that tool's output schema against the JSON Schema 2020-12 metaschema
before it compiles a validator; then it validates every result against it. Over HTTP a new
client session pays the listing and the check again, so they are part of "the first turn of a new
session" that `side_by_side.py` and `session_setup.py` time (in the client, beside the server).

This script times those three steps in this process, with the same libraries the SDK's client
uses, on parley's tools (listed from its MCP server built in memory, as the docs' reference is)
and on the floor's (bench/floor_server.py):

- the listing's size;
- `check_schema` of each tool's output schema (start_session's, and all tools together);
- validating a text turn's result with the compiled validator.

    .venv/bin/python bench/schema_cost.py [--repeat 20]

Prints readable lines and one JSON line. CPU-bound and single-threaded: figures move with the
machine's speed, so compare the two servers within one run.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio
from floor_server import TurnOutcomeView as FloorOutcome
from jsonschema.validators import validator_for
from referencing import Registry

import parley
from parley.server.tools import listed_tools

# The structured content of a demo text turn (start_session "hi"), as parley returns it.
TEXT_TURN: dict[str, Any] = {
    "session_id": "ses_58b58f98433641479362c9fb3117f8dc",
    "turn_id": "turn_dc608060527848869c4c005d95b0e61d",
    "status": "answered",
    "answer": "You said: hi (message 1 of this session)",
    "result": None,
    "pending": [],
    "tool_calls": [],
    "usage": {"input_tokens": 516, "output_tokens": 10, "cached_tokens": 0, "model_calls": 1},
    "error": None,
    "session_status": "idle",
    "queued_message_id": "qm_35c76e981615459a8a87c9484f07b19e",
    "notes": [],
    "agent_version": "af5a3a2c1bc6848d",
    "mode": None,
    "plan": None,
}


def ms_each(repeat: int, work: Any) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        work()
    return round((time.perf_counter() - started) / repeat * 1000, 3)


def check_ms(schema: dict[str, Any], repeat: int) -> float:
    """The SDK client's metaschema check of one output schema."""
    return ms_each(repeat, lambda: validator_for(schema).check_schema(schema))


def validate_ms(schema: dict[str, Any], result: dict[str, Any], repeat: int) -> float:
    """Validating one result with the compiled validator, as the SDK's client does every call."""
    validator = validator_for(schema)(schema, registry=Registry())
    return ms_each(repeat * 50, lambda: list(validator.iter_errors(result)))


async def parley_tools() -> list[dict[str, Any]]:
    return [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in await listed_tools()]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=20, help="checks of each schema (validations: 50x)")
    args = parser.parse_args()
    tools = anyio.run(parley_tools)
    outputs = {tool["name"]: tool["outputSchema"] for tool in tools if "outputSchema" in tool}
    floor_schema = FloorOutcome.model_json_schema()
    floor_result = {key: TEXT_TURN[key] for key in FloorOutcome.model_fields}
    figures: dict[str, Any] = {
        "parley_module": parley.__file__,
        "parley": {
            "tools": len(tools),
            "listing_bytes": len(json.dumps(tools)),
            "start_session_schema_bytes": len(json.dumps(outputs["start_session"])),
            "check_start_session_ms": check_ms(outputs["start_session"], args.repeat),
            "check_every_tool_ms": round(sum(check_ms(s, args.repeat) for s in outputs.values()), 1),
            "validate_text_turn_ms": validate_ms(outputs["start_session"], TEXT_TURN, args.repeat),
        },
        "floor": {
            "tools": 2,
            "start_session_schema_bytes": len(json.dumps(floor_schema)),
            "check_start_session_ms": check_ms(floor_schema, args.repeat),
            "validate_text_turn_ms": validate_ms(floor_schema, floor_result, args.repeat),
        },
    }
    for server in ("floor", "parley"):
        print(f"{server}: " + ", ".join(f"{key} {value}" for key, value in figures[server].items()))
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
