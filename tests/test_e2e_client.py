"""parley.client over stdio: the client starts `parley serve` itself (a process of its own), and
the same tests as tests/test_client.py (which runs them over HTTP in this process) run against it;
also a server that cannot be reached, and the client example (a program of its own)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

import parley.client as pc
from tests.support import FIXTURE_LOG, REPO, TEST_DEADLINE_S, fixture_in_process

# The same tests as tests/test_client.py, over stdio (this module's `world`):
from tests.test_client import OPTIONS, World, _config
from tests.test_client import test_a_conversation_keeps_its_history as test_a_conversation_keeps_its_history
from tests.test_client import (
    test_a_message_queued_behind_a_turn_that_waits_for_input_does_not_wait_forever as test_a_message_queued_behind_a_turn_that_waits_for_input_does_not_wait_forever,
)
from tests.test_client import (
    test_a_question_is_answered_by_the_callback_and_by_an_explicit_call as test_a_question_is_answered_by_the_callback_and_by_an_explicit_call,
)
from tests.test_client import test_a_running_turn_is_waited_through as test_a_running_turn_is_waited_through
from tests.test_client import (
    test_a_send_retried_after_the_connection_dropped_is_sent_once as test_a_send_retried_after_the_connection_dropped_is_sent_once,
)
from tests.test_client import (
    test_a_turn_is_followed_as_an_mcp_task_when_asked as test_a_turn_is_followed_as_an_mcp_task_when_asked,
)
from tests.test_client import (
    test_an_approval_is_decided_by_an_explicit_call as test_an_approval_is_decided_by_an_explicit_call,
)
from tests.test_client import (
    test_an_approval_is_decided_by_the_callback as test_an_approval_is_decided_by_the_callback,
)
from tests.test_client import (
    test_as_the_person_the_callbacks_decide_for_an_agent_that_takes_only_a_persons_word as test_as_the_person_the_callbacks_decide_for_an_agent_that_takes_only_a_persons_word,
)
from tests.test_client import (
    test_events_follow_a_turn_sent_by_the_same_client as test_events_follow_a_turn_sent_by_the_same_client,
)
from tests.test_client import (
    test_refusals_are_typed_errors_carrying_the_servers_text as test_refusals_are_typed_errors_carrying_the_servers_text,
)
from tests.test_client import (
    test_the_blocking_client_holds_a_conversation as test_the_blocking_client_holds_a_conversation,
)
from tests.test_client import (
    test_the_event_stream_follows_from_now_whoever_calls_and_survives_a_dropped_connection as test_the_event_stream_follows_from_now_whoever_calls_and_survives_a_dropped_connection,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("client-stdio")
    # The fixture MCP server runs in this process, over HTTP: the parleys the client starts use it.
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = _config(directory, fixture)
        with (directory / "server.log").open("a") as log:

            def connect_stdio(**changes: Any) -> AbstractAsyncContextManager[pc.Parley]:
                merged = replace(OPTIONS, **changes)
                return pc.connect_stdio(config, log_level="INFO", server_log=log, options=merged)

            async with connect_stdio() as parley:
                yield World("stdio", directory, parley, connect_stdio)


async def test_a_server_that_cannot_be_reached_is_a_connection_failure(tmp_path: Path) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        with pytest.raises(pc.ConnectionFailed, match="could not connect"):
            async with pc.connect_http("http://127.0.0.1:9/mcp"):
                pass
        with pytest.raises(pc.ConnectionFailed, match="No such file"):
            async with pc.connect_stdio(command=[str(tmp_path / "no-parley-here")]):
                pass


def test_the_client_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "client_demo.py")],
        capture_output=True,
        text=True,
        timeout=2 * TEST_DEADLINE_S,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "1. You said: hello (message 1 of this session)" in out
    assert "added note 1: buy milk" in out
    assert "A person declined this call: the notes stay" in out
    assert "4. waiting_for_input [('approval', 'notes__delete_notes')]" in out
    assert "deleted 1 note(s)" in out
    assert "The user answered: yes" in out
    assert "event: ToolFinished(tool='notes__add_note', status='succeeded')" in out
    assert "6. UnknownAgent: No agent named 'nobody'" in out
