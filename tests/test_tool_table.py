"""The tool table (parley/server/tools.py: TOOLS) is what tools/list publishes, in its order, and
what the published tools ask for stays put: names, titles, descriptions, input schemas
(types, descriptions, required fields, defaults) and annotations, against
tests/published_tools.json. A deliberate change to a tool's arguments updates that file:
`.venv/bin/python -m tests.test_tool_table > tests/published_tools.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator

from parley.server.tool_table import TurnEntry, without_field_noise
from parley.server.tools import TASK_TOOLS, TOOLS, listed_tools
from parley.server.wire import TurnOutcomeView

pytestmark = pytest.mark.anyio

PUBLISHED = Path(__file__).with_name("published_tools.json")
FIELDS = ("name", "title", "description", "inputSchema", "annotations")


async def _published() -> list[dict[str, Any]]:
    listed = [tool.model_dump(by_alias=True, mode="json") for tool in await listed_tools()]
    return [{key: tool[key] for key in FIELDS} for tool in listed]


async def test_tools_list_gives_the_tables_tools_in_its_order() -> None:
    assert [tool["name"] for tool in await _published()] == [entry.name for entry in TOOLS]


def test_the_tools_that_run_as_tasks_are_the_turn_entries_of_the_table() -> None:
    assert {entry.name for entry in TOOLS if isinstance(entry, TurnEntry)} == TASK_TOOLS
    assert {"start_session", "send_message", "approve", "answer_question", "execute_plan"} == TASK_TOOLS


async def test_every_tool_asks_for_what_it_published_before() -> None:
    published = await _published()
    expected = json.loads(PUBLISHED.read_text())
    assert [t["name"] for t in published] == [t["name"] for t in expected]
    for now, before in zip(published, expected, strict=True):
        assert now == before, now["name"]


async def test_output_schemas_leave_out_field_titles_and_null_defaults_and_accept_the_same() -> None:
    outputs = {tool.name: tool.output_schema for tool in await listed_tools()}
    text = json.dumps(outputs)
    assert '"title": "Session Id"' not in text and '"default": null' not in text
    session = outputs["get_session"]
    assert session is not None
    # Names stay: the result's, its shared types', and a field named "title".
    assert session["title"] == "SessionView" and "title" in session["properties"]
    assert all(name not in ("", None) for name in session["$defs"])
    # What pydantic writes and what is published accept the same results.
    full = TurnOutcomeView.model_json_schema()
    lean = without_field_noise(full)
    assert json.dumps(lean) != json.dumps(full)
    results: list[Any] = [
        {"session_id": "ses_1", "status": "answered", "answer": "hi"},
        {"session_id": "ses_1", "status": "answered", "answer": None, "turn_id": None},
        {
            "session_id": "ses_1",
            "status": "waiting_for_input",
            "pending": [{"id": "int_1", "kind": "approval"}],
        },
        {"session_id": "ses_1", "status": "nonsense"},
        {"session_id": 3, "status": "answered"},
        {"status": "answered"},
        {"session_id": "ses_1", "status": "answered", "pending": [{"id": "int_1", "kind": "no such kind"}]},
        # Optional fields, null or not: plain types, an enum, a shared type, any value.
        {"session_id": "ses_1", "status": "answered", "turn_id": 3},
        {"session_id": "ses_1", "status": "answered", "mode": None, "plan": None, "result": None},
        {"session_id": "ses_1", "status": "answered", "mode": "planning", "result": [1, "two"]},
        {"session_id": "ses_1", "status": "answered", "mode": "nonsense"},
        {"session_id": "ses_1", "status": "answered", "plan": {"status": "draft", "todos": []}},
        {"session_id": "ses_1", "status": "answered", "plan": "a plan"},
    ]
    before, after = Draft202012Validator(full), Draft202012Validator(lean)
    verdicts = [before.is_valid(result) for result in results]
    assert verdicts == [after.is_valid(result) for result in results]
    assert True in verdicts and False in verdicts
    # An optional field's null branch comes first, so a null does not fail another branch first.
    for name in ("turn_id", "mode", "plan", "result"):
        assert lean["properties"][name]["anyOf"][0] == {"type": "null"}, name


if __name__ == "__main__":
    print(json.dumps(anyio.run(_published), indent=1))
