# ruff: noqa: F811
"""The attachment part of the storage contract, on every backend (SQLite, PostgreSQL):
bytes stored with the message that brings them, once by hash, read back only through a session
that carries them, and collected when no session refers to them any more."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from parley.core.ids import new_turn_id
from parley.core.records import AttachmentBlob
from parley.core.transitions import starting
from parley.runtime.session_steps import SessionSteps
from parley.storage.ports import Store
from tests.test_storage_contract import PROC_A, T0, TTL, queued, session_record

# The contract's backends, as its fixtures (pytest finds them by name in this module; the tests
# take them as arguments of the same names, which ruff would call redefinitions).
from tests.test_storage_contract import backend, store  # noqa: F401  # isort: skip
from tests.store_support import enqueue, try_acquire_lease

pytestmark = pytest.mark.anyio


def _blob(data: bytes, mime_type: str = "image/png") -> AttachmentBlob:
    return AttachmentBlob(
        sha256=hashlib.sha256(data).hexdigest(), mime_type=mime_type, size=len(data), data=data
    )


def _ref(blob: AttachmentBlob, name: str = "a.png") -> dict[str, object]:
    kind = "image" if blob.mime_type.startswith("image/") else "resource"
    return {
        "kind": kind,
        "name": name,
        "mime_type": blob.mime_type,
        "size": blob.size,
        "sha256": blob.sha256,
        "uri": None,
    }


async def test_a_first_message_stores_its_attachments_with_it_and_the_turn_keeps_the_references(
    store: Store,
) -> None:
    picture = _blob(b"\x89PNG\r\n\x1a\nfirst")
    record = session_record()
    message = replace(queued(record.id, "look"), attachments=[_ref(picture)], blobs=(picture,))
    assert await store.create_session(starting(record, message), message, T0)
    assert await store.session_attachment(record.id, picture.sha256) == picture
    assert (await store.attachment_data([picture.sha256, "0" * 64])) == {picture.sha256: picture}
    [stored] = await store.list_queued(record.id)
    assert stored.attachments == [_ref(picture)] and stored.blobs == ()
    lease = await try_acquire_lease(store, record.id, PROC_A, T0, TTL)
    assert lease is not None
    assert await SessionSteps(store).start_turn(record.id, lease, new_turn_id(), T0 + 1) is not None
    [user] = await store.list_messages(record.id, None, None)
    assert user.content == {"text": "look", "attachments": [_ref(picture)]}


async def test_the_same_bytes_are_stored_once_and_each_session_reads_only_its_own(store: Store) -> None:
    picture, other = _blob(b"\x89PNG\r\n\x1a\nsame"), _blob(b"notes", "text/plain")
    first, second = session_record(), session_record(owner="bob")
    one = replace(queued(first.id, "one"), attachments=[_ref(picture)], blobs=(picture,))
    assert await store.create_session(starting(first, one), one, T0)
    assert await store.create_session(starting(second, None), None, T0)
    again = replace(
        queued(second.id, "again"), attachments=[_ref(picture), _ref(other)], blobs=(picture, other)
    )
    assert await enqueue(SessionSteps(store), second.id, "bob", again, 10, T0 + 1) == "queued"
    assert await store.session_attachment(second.id, picture.sha256) == picture
    assert await store.session_attachment(second.id, other.sha256) == other
    # The first session never carried `other`: its hash is no way in.
    assert await store.session_attachment(first.id, other.sha256) is None
    assert len(await store.attachment_data([picture.sha256, other.sha256])) == 2


async def test_a_refused_message_stores_no_bytes(store: Store) -> None:
    picture = _blob(b"\x89PNG\r\n\x1a\nrefused")
    record = session_record()
    assert await store.create_session(starting(record, None), None, T0)
    message = replace(queued(record.id, "x"), attachments=[_ref(picture)], blobs=(picture,))
    assert await enqueue(SessionSteps(store), record.id, "mallory", message, 10, T0) == "not_found"
    assert await store.attachment_data([picture.sha256]) == {}


async def test_collecting_drops_the_bytes_of_deleted_sessions_and_spares_those_still_referred_to(
    store: Store,
) -> None:
    shared, alone = _blob(b"\x89PNG\r\n\x1a\nshared"), _blob(b"\x89PNG\r\n\x1a\nalone")
    kept, gone = session_record(), session_record()
    a = replace(queued(kept.id, "a"), attachments=[_ref(shared)], blobs=(shared,))
    b = replace(queued(gone.id, "b"), attachments=[_ref(shared), _ref(alone)], blobs=(shared, alone))
    assert await store.create_session(starting(kept, a), a, T0)
    assert await store.create_session(starting(gone, b), b, T0)
    assert await store.collect_attachments(T0 + 10) == 0  # every blob is referred to
    # Cancelled before it started, the message is in the transcript, attachments and all.
    assert await SessionSteps(store).request_cancel(gone.id, "alice", T0 + 1, new_turn_id()) is not None
    [user] = await store.list_messages(gone.id, None, None)
    assert user.content["attachments"] == [_ref(shared), _ref(alone)]
    assert await store.delete_session(gone.id, T0 + 1) == "deleted"
    # Bytes stored since the cut-off are spared (a message may be about to refer to them again).
    assert await store.collect_attachments(T0) == 0
    assert await store.collect_attachments(T0 + 10) == 1
    assert await store.attachment_data([shared.sha256, alone.sha256]) == {shared.sha256: shared}
    assert await store.session_attachment(kept.id, shared.sha256) == shared


async def test_a_dropped_queued_message_releases_the_bytes_nothing_else_of_its_session_carries(
    store: Store,
) -> None:
    alone, shared, sent = (_blob(b"\x89PNG\r\n\x1a\n" + n) for n in (b"alone", b"shared", b"sent"))
    record = session_record()
    first = replace(queued(record.id, "first"), attachments=[_ref(sent)], blobs=(sent,))
    assert await store.create_session(starting(record, first), first, T0)
    lease = await try_acquire_lease(store, record.id, PROC_A, T0, TTL)
    assert lease is not None
    assert await SessionSteps(store).start_turn(record.id, lease, new_turn_id(), T0 + 1) is not None
    steps = SessionSteps(store)
    dropped = replace(
        queued(record.id, "drop me"),
        attachments=[_ref(alone), _ref(shared), _ref(sent)],
        blobs=(alone, shared, sent),
    )
    kept = replace(queued(record.id, "keep me"), attachments=[_ref(shared)], blobs=(shared,))
    for message in (dropped, kept):
        assert await enqueue(steps, record.id, "alice", message, 10, T0 + 2) == "queued"
    assert await steps.delete_queued(record.id, "alice", dropped.id, T0 + 3) is not None
    # `alone` was only the dropped message's; `shared` another queued message carries, and `sent`
    # the transcript's first message.
    assert await store.session_attachment(record.id, alone.sha256) is None
    assert await store.session_attachment(record.id, shared.sha256) == shared
    assert await store.session_attachment(record.id, sent.sha256) == sent
    assert await store.collect_attachments(T0 + 10) == 1
    assert await store.attachment_data([alone.sha256, shared.sha256, sent.sha256]) == {
        shared.sha256: shared,
        sent.sha256: sent,
    }
