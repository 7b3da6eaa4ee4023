"""GET /v1/sessions/{id}/events with a second `parley serve --http` process on the same database:
the events it writes reach a stream opened on the first parley (here in the test's process), woken
through the file's wake folder: both poll only once a minute (the longest poll_interval_s), and the
stream's heartbeat (after which it looks again) is a minute too, so nothing else brings them
within the test's deadline. The rest of the event stream's behaviour is
tests/test_event_stream.py, in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from tests.sse_support import Frame, events, read_until
from tests.support import InProcessServer, Served, ServerProcess, call, write_config

pytestmark = pytest.mark.anyio


class World(Served):
    def stream_url(self, session_id: str) -> str:
        return f"{self.server.base_url}/v1/sessions/{session_id}/events"

    async def read(self, session_id: str, after: int | None, stop: Any) -> list[Frame]:
        headers = {"Last-Event-ID": str(after)} if after is not None else None
        return await read_until(self.stream_url(session_id), stop, headers=headers)


def _ended(frame: Frame) -> bool:
    return frame.kind == "turn_ended"


@pytest.fixture
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("event_stream")
    config = write_config(
        directory, agents={"worker": {}}, runtime={"poll_interval_s": 60}, http={"stream_heartbeat_s": 60}
    )
    async with InProcessServer(config, http=True) as server:
        yield World(server, directory)
        assert "Traceback" not in server.log(), server.log()


async def test_events_written_by_a_second_process_reach_the_first_ones_stream(world: World) -> None:
    async with world.server.client() as client:
        sid = (await call(client, "start_session", agent="worker"))["session_id"]
    async with (
        ServerProcess(world.server.config_path, name="second", http=True) as second,
        second.client() as other,
    ):
        # Opened on the first process; the message goes through the second.
        seen: list[Frame] = []

        async def send_when_streaming() -> None:
            outcome = await call(other, "send_message", session_id=sid, message="from the other process")
            assert outcome["status"] == "answered", outcome

        async with anyio.create_task_group() as tg:

            def stop(frame: Frame) -> bool:
                if not seen:  # the stream is open (its first frame, the session's first event)
                    seen.append(frame)
                    tg.start_soon(send_when_streaming)
                return _ended(frame)

            frames = await world.read(sid, 0, stop)
    kinds = [f.kind for f in events(frames)]
    assert kinds[-4:] == ["message_queued", "turn_started", "model_step", "turn_ended"], kinds
    answer = [f for f in events(frames) if f.kind == "model_step"][-1].data["data"]["text"]
    assert answer == "You said: from the other process (message 1 of this session)"
