"""Replaying a session (replay_session; `parley replay`): its messages sent again to a new session,
turn by turn. Only tools the configuration classifies as read run; every other call gets the
original's recorded result for the same tool and arguments, or "not replayed": a replay never
repeats a real-world write. In-process, through the MCP tools, on the demo model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from parley.cli import main
from parley.core.records import InterruptRecord, Resolution, ToolCallRecord
from parley.core.replays import (
    NEW_QUESTION,
    NEW_SERVER_QUESTION,
    NOT_REPLAYED,
    REPLAY_RESOLVER,
    WAITED,
    ReplayAnswers,
    ReplayBook,
)
from parley.testing import ToolServer, call, call_error, eventually, parley_app, write_config
from tests.support import db_rows

pytestmark = pytest.mark.anyio


def shop_tools() -> ToolServer:
    shop = ToolServer("shop")

    @shop.tool()
    async def lookup(order: str) -> str:
        """Look an order up (configured as read)."""
        return f"order {order}: 2 books"

    @shop.tool(read_only=True)
    async def peek(order: str) -> str:
        """Look at an order (its own annotation says read-only; the configuration does not)."""
        return f"order {order}: peeked"

    @shop.tool()
    async def charge(cents: int) -> str:
        """Take money (a write that may not be repeated)."""
        return f"charged {cents} cents"

    return shop


MESSAGES = [
    '/tool shop__lookup {"order": "A-1"}\n/tool shop__peek {"order": "A-1"}',
    '/tool shop__charge {"cents": 500}',
    "/ask Ship it? | yes | no",
    "thanks",
]


async def _settled(client: Any, sid: str) -> dict[str, Any]:
    """The session once its queue is done."""
    found: dict[str, Any] = {}

    async def idle() -> bool:
        found.update(await call(client, "get_session", session_id=sid, messages_from=1, messages_limit=200))
        return bool(found["status"] == "idle")

    await eventually(idle, f"the replay {sid} to finish its turns")
    return found


async def test_a_replay_runs_reads_and_settles_every_other_call_from_the_record(tmp_path: Path) -> None:
    shop = shop_tools()
    agents = {"worker": {"tools": ["ask_user"], "mcp_servers": ["shop"]}}
    async with shop.serve():
        policies = {"lookup": {"effect": "read"}, "charge": {"approval": "never"}}
        config = {"mcp_servers": {"shop": {**shop.entry, "tools": policies}}}
        async with parley_app(config, agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
            first = await call(client, "start_session", agent="worker", message=MESSAGES[0])
            sid = first["session_id"]
            await call(client, "send_message", session_id=sid, message=MESSAGES[1])
            asked = await call(client, "send_message", session_id=sid, message=MESSAGES[2])
            [question] = asked["pending"]
            await call(client, "answer_question", session_id=sid, interrupt_id=question["id"], answer="yes")
            await call(client, "send_message", session_id=sid, message=MESSAGES[3])
            before = {tool: len(shop.ran(tool)) for tool in ("lookup", "peek", "charge")}

            started = await call(client, "replay_session", session_id=sid)
            replay = await _settled(client, started["session_id"])
            original = await call(client, "get_session", session_id=sid, messages_from=1, messages_limit=200)

    assert started["tags"] == ["eval", "replay"] and started["session_id"] != sid
    assert replay["turn_count"] == 4 and replay["status"] == "idle"
    after = {tool: len(shop.ran(tool)) for tool in ("lookup", "peek", "charge")}
    assert after == {"lookup": before["lookup"] + 1, "peek": before["peek"], "charge": before["charge"]}, (
        "only the tool configured as read ran again; the write and the annotated read did not"
    )
    results, originals = tool_results(replay), tool_results(original)
    assert results["shop__charge"]["text"] == originals["shop__charge"]["text"] == "charged 500 cents"
    assert results["shop__peek"]["text"] == originals["shop__peek"]["text"], "the recorded result stands in"
    assert results["ask_user"]["text"] == "The user answered: yes", "the recorded answer is replayed"
    assert [m["text"] for m in replay["messages"] if m["role"] == "user"] == MESSAGES
    assert original["turn_count"] == 4, "the original is unchanged"


async def test_a_replay_of_a_foreign_or_empty_session_is_refused(tmp_path: Path) -> None:
    async with parley_app(directory=tmp_path) as parley, parley.mcp() as client:
        empty = await call(client, "start_session", agent="demo")
        nothing = await call_error(client, "replay_session", session_id=empty["session_id"])
        unknown = await call_error(client, "replay_session", session_id="ses_" + "0" * 32)
        no_agent = await call_error(client, "replay_session", session_id=empty["session_id"], agent="nobody")
    assert "no message to replay" in nothing
    assert "was found for you" in unknown
    assert "no agent 'nobody'" in no_agent


def tool_results(session: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A session's tool results by the name of the tool called."""
    names = {c["id"]: c["name"] for m in session["messages"] for c in m["tool_calls"]}
    return {names[m["tool_call_id"]]: m for m in session["messages"] if m["role"] == "tool"}


def _call(name: str, arguments: dict[str, Any], status: str, text: str) -> ToolCallRecord:
    return ToolCallRecord(
        id="call_" + "0" * 32,  # type: ignore[arg-type]
        session_id="ses_" + "0" * 32,  # type: ignore[arg-type]
        turn_id="turn_" + "0" * 32,  # type: ignore[arg-type]
        step_no=1,
        call_index=0,
        name=name,
        arguments=arguments,
        status=status,  # type: ignore[arg-type]
        effect="non_idempotent_write",
        result={"text": text, "is_error": status != "succeeded"},
        attempts=1,
        idempotency_key="k",
        created_at=0.0,
        updated_at=0.0,
    )


def test_each_recorded_result_stands_in_once_matched_by_canonical_arguments() -> None:
    book = ReplayBook.of([_call("pay", {"b": 2, "a": 1}, "succeeded", "paid once")], [])
    first = book.settle("pay", {"a": 1, "b": 2}, runs=False)
    again = book.settle("pay", {"a": 1, "b": 2}, runs=False)
    other = book.settle("pay", {"a": 1, "b": 3}, runs=False)
    assert first is not None and first.result["text"] == "paid once" and first.status == "succeeded"
    assert again is not None and again.result["text"] == NOT_REPLAYED and again.status == "failed"
    assert other is not None and other.result["text"] == NOT_REPLAYED
    assert book.settle("lookup", {}, runs=True) is None, "a configured read runs"
    assert book.settle("write_todos", {"todos": []}, runs=False) is None, "the session's own state"
    waited = book.settle("durable_wait", {"duration_seconds": 3600}, runs=False)
    assert waited is not None and waited.result["text"] == WAITED
    asked = book.settle("ask_user", {"question": "new?"}, runs=False)
    assert asked is not None and asked.result["text"] == NEW_QUESTION and asked.result["declined"]


def test_a_replay_resumed_after_a_crash_does_not_use_a_record_twice() -> None:
    recorded = [_call("pay", {"a": 1}, "succeeded", "paid")]
    # The replay's own stored call that took the record before the crash.
    taken = replace(_call("pay", {"a": 1}, "succeeded", "paid"), result={"text": "paid", "replayed": True})
    book = ReplayBook.of(recorded, [taken])
    settled = book.settle("pay", {"a": 1}, runs=False)
    assert settled is not None and settled.result["text"] == NOT_REPLAYED


def _asked(
    call: ToolCallRecord, question: str, status: str, by: str | None = None, **resolution: Any
) -> InterruptRecord:
    """A question the server of `call` asked, as stored: resolved by `by` (pending without one)."""
    return InterruptRecord(
        id=f"int_{question}",
        session_id=call.session_id,
        turn_id=call.turn_id,
        tool_call_id=call.id,
        kind="question",
        status=status,  # type: ignore[arg-type]
        payload={"question": question, "downstream": {"mode": "retry"}},
        created_at=0.0,
        resolution=resolution or None,
        resolved_by=by,
    )


def test_a_servers_question_in_a_replay_takes_the_recorded_answer_once_then_is_declined() -> None:
    look = _call("look", {"at": "box"}, "succeeded", "a box")
    recorded = [_asked(look, "Which box?", "answered", by="alice", answer="large")]
    answers = ReplayAnswers.of(([look], recorded), ([], []))
    replayed = replace(look, id="call_" + "1" * 32)  # type: ignore[arg-type]
    assert answers.resolve(replayed, _asked(replayed, "Which box?", "pending")) == Resolution(answer="large")
    again = answers.resolve(replayed, _asked(replayed, "Which box?", "pending"))
    assert again == Resolution(declined=True, reason=NEW_SERVER_QUESTION), "each recorded answer once"
    other = replace(look, id="call_" + "2" * 32, arguments={"at": "bag"})  # type: ignore[arg-type]
    assert answers.resolve(other, _asked(other, "Which box?", "pending")).declined, "other arguments"
    # After a crash: the replay's own resolved question counts as used.
    taken = _asked(replayed, "Which box?", "answered", answer="large", by=REPLAY_RESOLVER)
    resumed = ReplayAnswers.of(([look], recorded), ([replayed], [taken]))
    assert resumed.resolve(replayed, _asked(replayed, "Which box?", "pending")).declined


def test_parley_replay_reports_each_turn_beside_the_original(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`parley replay` runs the engine in its own process (here: this one) on the database."""
    config = write_config(tmp_path, {})
    messages = ["hello", '/tool write_todos {"todos": [{"content": "one"}]}']

    async def original() -> str:
        async with parley_app(config) as parley, parley.mcp() as client:
            first = await call(client, "start_session", agent="demo", message=messages[0])
            await call(client, "send_message", session_id=first["session_id"], message=messages[1])
            return str(first["session_id"])

    sid = anyio.run(original)
    assert main(["replay", sid, "--config", str(config), "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["original"] == sid and report["agent"] == "demo"
    assert [t["replay_status"] for t in report["turns"]] == ["answered", "answered"]
    assert report["turns"][0]["original_answer"] == report["turns"][0]["replay_answer"]
    assert report["turns"][1]["replay_tools"] == ["write_todos"] and report["ran"] == 1
    assert main(["replay", "ses_" + "0" * 32, "--config", str(config)]) == 1
    assert "was found for you" in capsys.readouterr().err


def test_parley_replay_on_an_agent_file_not_deployed_or_a_stored_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {})
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text("name: demo\ndescription: the next demo\ntools: [write_todos]\n")

    async def original() -> tuple[str, str]:
        async with parley_app(config) as parley, parley.mcp() as client:
            first = await call(client, "start_session", agent="demo", message="hello")
            return str(first["session_id"]), str(first["agent_version"])

    sid, live = anyio.run(original)
    assert main(["replay", sid, "--config", str(config), "--agent-file", str(candidate), "--json"]) == 0
    [on_file] = json.loads(capsys.readouterr().out)
    assert main(["replay", sid, "--config", str(config), "--agent", f"demo@{live}", "--json"]) == 0
    [on_live] = json.loads(capsys.readouterr().out)
    assert main(["replay", sid, "--config", str(config), "--agent", "demo@0000"]) == 1
    assert "'0000' is not a version of agent 'demo'" in capsys.readouterr().err

    def versions(session_id: str) -> list[str]:
        rows = db_rows(
            tmp_path / "parley.db", "SELECT agent_version FROM turns WHERE session_id = ?", (session_id,)
        )
        return [str(version) for (version,) in rows]

    turns = {report["replay"]: versions(report["replay"]) for report in (on_file, on_live)}
    assert turns[on_live["replay"]] == [live]
    [file_version] = turns[on_file["replay"]]
    assert file_version not in (None, live), "the file's definition is a version of its own"
