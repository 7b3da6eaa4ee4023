"""The typed patches of parley/core/changes.py stay in step with the records they change: every
key is a field of its record with the record's type, and every field is either patchable or
named here as one a decision never changes."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, get_type_hints

import pytest

from parley.core.changes import (
    Changes,
    InterruptPatch,
    QueuedPatch,
    SessionPatch,
    ToolCallPatch,
    TurnPatch,
)
from parley.core.records import (
    InterruptRecord,
    QueuedMessageRecord,
    SessionRecord,
    ToolCallRecord,
    TurnRecord,
)

# Per record: the fields no patch writes (what makes the record the one it is, and what it was
# created with). A new field of a record goes in its patch or here.
NEVER_PATCHED: dict[type, set[str]] = {
    SessionRecord: {
        "id",
        "agent",
        "owner",
        "kind",
        "created_at",
        "inputs",
        "start_client_message_id",
        "replay_of",
        # A fork's lineage and its agent version pin: what it was created with.
        "parent_session_id",
        "parent_turn",
        "agent_version_pin",
        # Whether it may carry its owner's credentials: set when a schedule starts it.
        "owner_credentials",
    },
    TurnRecord: {
        "id",
        "session_id",
        "seq",
        "queued_message_id",
        "started_at",
        "settings",
        "agent_version",
        "mode",
    },
    ToolCallRecord: {
        "id",
        "session_id",
        "turn_id",
        "step_no",
        "call_index",
        "name",
        "arguments",
        "effect",
        "idempotency_key",
        "created_at",
        "source",
        "server",
        "tool",
        "requires_approval",
    },
    InterruptRecord: {
        "id",
        "session_id",
        "turn_id",
        "tool_call_id",
        "kind",
        "payload",
        "created_at",
        "deadline",
    },
    QueuedMessageRecord: {
        "id",
        "session_id",
        "seq",
        "text",
        "created_at",
        "client_message_id",
        "settings",
        "attachments",
        "mode",
        "blobs",
        "trace_context",
    },
}

PATCHES: list[tuple[Any, type]] = [
    (SessionPatch, SessionRecord),
    (TurnPatch, TurnRecord),
    (ToolCallPatch, ToolCallRecord),
    (InterruptPatch, InterruptRecord),
    (QueuedPatch, QueuedMessageRecord),
]


@pytest.mark.parametrize(("patch", "record"), PATCHES, ids=lambda v: getattr(v, "__name__", ""))
def test_each_key_of_a_patch_is_a_field_of_its_record_with_its_type(patch: Any, record: type) -> None:
    patch_types = get_type_hints(patch)
    record_types = get_type_hints(record)
    assert set(patch_types) <= set(record_types)
    for name, patch_type in patch_types.items():
        assert patch_type == record_types[name], name


@pytest.mark.parametrize(("patch", "record"), PATCHES, ids=lambda v: getattr(v, "__name__", ""))
def test_every_field_of_a_record_is_patchable_or_never_patched(patch: Any, record: type) -> None:
    record_fields = {f.name for f in fields(record)}
    patchable = set(get_type_hints(patch))
    assert not patchable & NEVER_PATCHED[record]
    assert patchable | NEVER_PATCHED[record] == record_fields


def test_patches_are_plain_dicts_at_run_time() -> None:
    # Storage iterates them and maps each field name to its column.
    changes = Changes()
    changes.session["status"] = "running"
    assert type(changes.session) is dict and type(changes.turn) is dict
    assert dict(changes.session.items()) == {"status": "running"}
    assert all(type(part) is dict for part in (changes.calls, changes.interrupts, changes.queued))
