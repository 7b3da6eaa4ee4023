"""parley/core/states.py is the one source of the statuses: storage re-exports them, the client
mirrors them (it imports nothing of the server's side of parley), and every set is made of
statuses that exist."""

from __future__ import annotations

from typing import get_args

import pytest

from parley.client import events as client_events
from parley.client import models as client_models
from parley.client import tasks as client_tasks
from parley.core import records as base
from parley.core import states

STATUS_LITERALS = [
    "SessionStatus",
    "TurnStatus",
    "ToolCallStatus",
    "InterruptStatus",
    "QueuedStatus",
    "TaskStatus",
]


@pytest.mark.parametrize("name", STATUS_LITERALS)
def test_storage_exports_the_status_literals_of_core(name: str) -> None:
    assert get_args(getattr(base, name)) == get_args(getattr(states, name))


def test_storage_exports_the_status_sets_of_core() -> None:
    assert base.FINAL_TOOL_STATUSES == states.FINAL_TOOL_STATUSES
    assert base.TERMINAL_TASK_STATUSES == states.TERMINAL_TASK_STATUSES
    assert set(base.ENDED_STATUSES) == states.ENDED_SESSION


def test_the_clients_mirror_is_core() -> None:
    # In order too: the client's models are compared with the output schemas the server publishes.
    assert get_args(client_models.OutcomeStatus) == get_args(states.OutcomeStatus)
    assert client_models.AT_REST == states.AT_REST
    assert client_events.TURN_END_STATUSES == states.TURN_ENDED
    assert client_tasks.TERMINAL_TASK_STATUSES == states.TERMINAL_TASK_STATUSES


def _statuses(literal: object) -> set[str]:
    return set(get_args(literal))


def test_every_set_is_made_of_statuses_of_its_kind() -> None:
    session = _statuses(states.SessionStatus)
    assert session >= states.ENDED_SESSION
    assert session >= states.SESSION_AT_REST
    assert session >= states.DRIVEN_SESSION
    assert {states.RUNNING_SESSION, states.PARKED_SESSION, states.IDLE_SESSION} <= session
    assert _statuses(states.TurnStatus) >= states.TURN_ENDED
    assert _statuses(states.OutcomeStatus) >= states.AT_REST
    calls = _statuses(states.ToolCallStatus)
    for calls_set in (
        states.FINAL_TOOL_STATUSES,
        states.WAITING_CALLS,
        states.RUNNABLE_CALLS,
        states.TIMED_CALLS,
    ):
        assert calls_set <= calls
    assert _statuses(states.TaskStatus) >= states.TERMINAL_TASK_STATUSES


def test_the_sets_say_what_their_names_do() -> None:
    # A session rests or is driven, never both; a turn's outcome is its status, or a parked or
    # idle session's; a call may run, waits, or is decided, exactly one of them.
    assert _statuses(states.SessionStatus) == states.SESSION_AT_REST | states.DRIVEN_SESSION
    assert not states.SESSION_AT_REST & states.DRIVEN_SESSION
    assert _statuses(states.OutcomeStatus) == _statuses(states.TurnStatus) | {"waiting_for_input", "idle"}
    assert states.TURN_ENDED | {"idle"} == states.AT_REST
    kinds = (states.RUNNABLE_CALLS, states.WAITING_CALLS, states.FINAL_TOOL_STATUSES)
    assert sum(len(kind) for kind in kinds) == len(_statuses(states.ToolCallStatus))
    assert set().union(*kinds) == _statuses(states.ToolCallStatus)
    assert states.TIMED_CALLS <= states.WAITING_CALLS
