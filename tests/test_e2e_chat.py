"""`parley chat` in a real terminal (a pseudo-terminal driven by pexpect): a conversation, an
approval answered at the prompt, Ctrl-C cancelling a long turn and twice quitting; resuming a
session; plain text with both sides of the conversation when stdout is not a terminal; and plan
mode: a draft plan shown, approved with /execute (the executing turn still asks its approvals), or
dropped with /discard."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pexpect
import pytest

from tests.support import (
    FIXTURE_LOG,
    REPO,
    TEST_DEADLINE_S,
    ServerProcess,
    db_rows,
    fixture_runs,
    fixture_server,
    tokens_auth,
    write_config,
)

PROMPT = "you> "


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("chat")
    return write_config(
        directory,
        agents={
            "worker": {"mcp_servers": ["fixture"], "tools": ["ask_user"]},
            "guarded": {"mcp_servers": ["fixture"], "tools": ["ask_user"], "approver": "human"},
            "planner": {"mcp_servers": ["fixture"], "tools": ["write_todos", "ask_user"], "plan_mode": True},
        },
        mcp_servers={"fixture": fixture_server(directory / FIXTURE_LOG)},
    )


@pytest.fixture
def chat(config: Path) -> Iterator[pexpect.spawn[str]]:
    """`parley chat worker` on a terminal of 160 columns."""
    yield from _terminal_chat(config, "worker")


def _terminal_chat(config: Path, agent: str) -> Iterator[pexpect.spawn[str]]:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "parley", "chat", agent, "--config", str(config)],
        cwd=str(REPO),
        env={**os.environ, "TERM": "xterm"},
        encoding="utf-8",
        timeout=TEST_DEADLINE_S,
        dimensions=(40, 160),
    )
    try:
        child.expect(PROMPT)
        yield child
    finally:
        child.close(force=True)


def _session_id(child: pexpect.spawn[str]) -> str:
    child.expect(r"session (ses_[0-9a-f]{32})")
    assert isinstance(child.match, re.Match), child.match
    return str(child.match.group(1))


def test_a_conversation_with_an_approval_answered_at_the_prompt(
    chat: pexpect.spawn[str], config: Path
) -> None:
    chat.sendline("hello")
    sid = _session_id(chat)
    chat.expect(r"You said: hello \(message 1 of this session\)")
    chat.expect(PROMPT)
    chat.sendline("and again")
    chat.expect(r"You said: and again \(message 2 of this session\)")
    chat.expect(PROMPT)
    chat.sendline('/tool fixture__bare {"text": "at the prompt"}')
    chat.expect(r"worker wants to call fixture__bare \(unclassified\) with \{\"text\": \"at the prompt\"\}")
    chat.expect(r"Allow\? \[y/n")
    chat.sendline("maybe")
    chat.expect("answer y or n")
    chat.sendline("y")
    chat.expect("tool fixture__bare started")
    chat.expect("tool fixture__bare succeeded")
    chat.expect("bare at the prompt")
    chat.expect(PROMPT)
    assert fixture_runs(config.parent, "bare", text="at the prompt") == 1
    chat.sendline("/ask Ship it? | yes | no")
    chat.expect(r"Ship it\?  1\) yes  2\) no")
    chat.sendline("2")
    chat.expect("The user answered: no")
    chat.expect(PROMPT)
    chat.sendline("/quit")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    users = db_rows(
        config.parent / "parley.db",
        "SELECT count(*) FROM messages WHERE session_id = ? AND role = 'user'",
        (sid,),
    )
    assert users == [(4,)]  # hello, and again, the tool call, the question


def test_ctrl_c_cancels_a_long_turn_and_twice_quits(chat: pexpect.spawn[str], config: Path) -> None:
    chat.sendline("/sleep 600")
    sid = _session_id(chat)
    chat.expect("working")  # the turn has started on the server
    chat.sendcontrol("c")
    chat.expect("cancelling the turn")
    chat.expect("turn cancelled", timeout=TEST_DEADLINE_S)
    chat.expect(PROMPT)
    chat.sendline("still here?")
    chat.expect(r"You said: still here\? \(message 2 of this session\)")
    chat.expect(PROMPT)
    chat.sendcontrol("c")
    chat.expect(r"Ctrl-C again")
    chat.sendcontrol("c")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    turns = db_rows(
        config.parent / "parley.db", "SELECT status FROM turns WHERE session_id = ? ORDER BY rowid", (sid,)
    )
    assert turns == [("cancelled",), ("answered",)]


def test_the_person_at_the_chat_decides_for_an_agent_that_takes_only_a_persons_word(config: Path) -> None:
    # approver: human refuses approve and answer_question; the chat answers the forms as the person.
    for chat in _terminal_chat(config, "guarded"):
        chat.sendline('/tool fixture__bare {"text": "by a person"}')
        sid = _session_id(chat)
        chat.expect(r"Allow\? \[y/n")
        chat.sendline("n not today")
        chat.expect("not today")
        chat.expect(PROMPT)
        chat.sendline('/tool fixture__bare {"text": "by a person"}')
        chat.expect(r"Allow\? \[y/n")
        chat.sendline("y")
        chat.expect("bare by a person")
        chat.expect(PROMPT)
        chat.sendline("/ask Stop here? | yes | no")
        chat.expect(r"Stop here\?  1\) yes")  # the question, not the echo of the line typed
        chat.sendline("/cancel")
        chat.expect("turn cancelled")
        chat.expect(PROMPT)
    assert fixture_runs(config.parent, "bare", text="by a person") == 1
    decisions = db_rows(
        config.parent / "parley.db",
        "SELECT action, outcome, detail FROM audit WHERE session_id = ? AND action IN ('approve', 'reject')",
        (sid,),
    )
    assert [(a, o) for a, o, _ in decisions] == [("reject", "ok"), ("approve", "ok")]
    assert all('"mrtr"' in detail for _, _, detail in decisions)


def test_a_session_is_resumed_by_id(config: Path) -> None:
    first = _plain_chat(config, ["worker"], "remember me\n")
    sid = first.split("session ", 1)[1].split()[0]
    resumed = _plain_chat(config, ["--session", sid], "and now?\n/sessions\n")
    assert f"resumed session {sid} with worker" in resumed
    assert "You said: and now? (message 2 of this session)" in resumed
    assert f"* {sid}" in resumed


def _plain_chat(config: Path, args: list[str], typed: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "parley", "chat", *args, "--config", str(config)],
        input=typed,
        capture_output=True,
        text=True,
        timeout=TEST_DEADLINE_S,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_without_a_terminal_the_chat_is_plain_text_with_both_sides(config: Path) -> None:
    out = _plain_chat(config, ["worker"], "hello\n/ask Ship it? | yes | no\nyes\n")
    assert "\033[" not in out
    lines = out.splitlines()
    assert "you: hello" in lines
    assert "worker: You said: hello (message 1 of this session)" in lines
    assert "Ship it?  1) yes  2) no  [/decline to decline]" in lines
    assert "you: yes" in lines
    assert any("The user answered: yes" in line for line in lines)


@pytest.mark.anyio
async def test_the_chat_talks_to_a_server_over_http_with_a_token(tmp_path: Path) -> None:
    token = "parley_" + secrets.token_urlsafe(32)
    config = write_config(
        tmp_path,
        auth=tokens_auth({"alice": token}),
    )

    def chat(url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "parley", "chat", "--url", url],
            input="hello over http\n",
            capture_output=True,
            text=True,
            timeout=TEST_DEADLINE_S,
            cwd=REPO,
            env={**os.environ, **env},
        )

    async with ServerProcess(config, http=True) as server:
        url = server.url or ""
        with_token = await anyio.to_thread.run_sync(chat, url, {"PARLEY_TOKEN": token})
        without = await anyio.to_thread.run_sync(chat, url, {"PARLEY_TOKEN": ""})
    assert with_token.returncode == 0, with_token.stderr
    assert "demo: You said: hello over http (message 1 of this session)" in with_token.stdout
    assert db_rows(tmp_path / "parley.db", "SELECT DISTINCT owner FROM sessions") == [("alice",)]
    assert without.returncode == 1
    assert f"error: {url} answered HTTP 401 Unauthorized (is the token right?" in without.stdout


def _todos(*items: str) -> str:
    return "/tool write_todos " + json.dumps({"todos": [{"content": item} for item in items]})


def test_a_draft_plan_is_shown_and_approved_with_execute(config: Path) -> None:
    bare = '/tool fixture__bare {"text": "planned"}'
    typed = f"/plan {_todos('look first', bare)}\n/execute\ny\n/execute\n"
    out = _plain_chat(config, ["planner"], typed)
    lines = out.splitlines()
    draft = lines.index("plan (revision 1, draft):")
    assert lines[draft + 1 : draft + 3] == ["  1. [ ] look first", f"  2. [ ] {bare}"], out
    assert "[/execute approves it and lets the agent act; a message revises it; /discard drops it]" in lines
    # Approving the plan grants nothing else: the executing turn's call still asks.
    assert any("planner wants to call fixture__bare" in line for line in lines), out
    done = lines.index("plan (revision 2, completed):")
    assert lines[done + 1 : done + 3] == ["  1. [x] look first", f"  2. [x] {bare}"], out
    assert lines[-1] == "[no draft plan to approve]", out
    assert fixture_runs(config.parent, "bare", text="planned") == 1


def test_a_draft_plan_is_dropped_with_discard(config: Path) -> None:
    bare = '/tool fixture__bare {"text": "never"}'
    out = _plain_chat(config, ["planner"], f"{_todos(bare)}\n/discard\n/plan\nhello\n")
    lines = out.splitlines()
    assert "plan (revision 1, draft):" in lines, out
    assert "[the draft plan was discarded; your next message is an ordinary turn]" in lines
    assert "plan (revision 1, cleared):" in lines, "/plan shows the plan as it is now"
    assert "planner: You said: hello (message 2 of this session)" in lines, out
    assert fixture_runs(config.parent, "bare", text="never") == 0
