"""A crash between the commit of an event and its delivery: a real `parley serve` process
SIGKILLs itself right after it committed a question (the fault point interrupt_raised), while
the receiver is not even listening; the next process on the same database delivers the
delivery that commit wrote, once, under its id, signed."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml
from mcp.shared.exceptions import MCPError
from standardwebhooks import Webhook

from parley.testing import FAST_RUNTIME, eventually, parley_app
from tests.support import Database, ServerProcess, call
from tests.webhook_support import SECRET, Receiver, free_port, serving_receiver

pytestmark = pytest.mark.anyio

SECRET_ENV = "PARLEY_TEST_WEBHOOK_SECRET"


async def test_a_delivery_committed_just_before_a_sigkill_is_delivered_by_the_next_process(
    tmp_path: Path, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver(port=free_port())
    hook = {
        "url": receiver.url("/after-crash"),
        "events": ["session.waiting_for_input"],
        "secret_env": SECRET_ENV,
        "allow_private": True,
        "retry_base_s": 0.2,
        "retry_max_s": 0.5,
        "max_attempts": 50,
    }
    config = {"storage": database.storage(), "runtime": FAST_RUNTIME, "webhooks": {"after": hook}}
    path = tmp_path / "parley.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {SECRET_ENV: SECRET}
    async with ServerProcess(
        path, name="doomed", fault="interrupt_raised", db=database.db_arg, env=env
    ) as doomed:
        async with doomed.client() as client:
            # The process may die before it answers: the commit is what counts.
            with contextlib.suppress(MCPError):
                await call(
                    client, "start_session", agent="demo", message="/ask Ship it? | yes | no", wait_seconds=0
                )
        assert await doomed.wait_exit() == -9, doomed.log()
    [(delivery_id, status)] = database.rows("SELECT id, status FROM webhook_deliveries")
    assert status == "pending" and receiver.received == []

    monkeypatch.setenv(SECRET_ENV, SECRET)
    async with serving_receiver(receiver), parley_app(path, db=database.db_arg):

        async def delivered() -> bool:
            return any(r.status == 200 for r in receiver.received)

        await eventually(delivered, "the delivery the killed process committed")

    assert [r.id for r in receiver.received] == [delivery_id]
    payload = Webhook(SECRET).verify(receiver.received[0].body, receiver.received[0].headers)
    assert (payload["type"], payload["data"]["reason"]) == ("session.waiting_for_input", "question")
