# ruff: noqa: F811
"""Per-principal credentials on every backend, through the vault: tokens come back as saved and
the database holds none in clear; a ciphertext moved to another row, or swapped between access
and refresh, does not decrypt; a rotation keeps old rows readable, re-encrypts them, and lets the
old key go; of two processes claiming one refresh exactly one wins, and a claim that ran out is
taken over; revoking one principal's credentials leaves everybody else's. The backends and
fixtures are the storage contract's (tests/test_storage_contract.py)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from parley.core.credentials import CLAIM_S, CredentialKey, may_claim, needs_refresh
from parley.errors import CredentialError
from parley.runtime.credentials import CredentialVault, Keyring, key_id
from parley.storage.ports import Store
from tests.test_storage_contract import T0, _Backend, _PostgresBackend, _SqliteBackend

# The contract's backends, as its fixtures (see tests/test_storage_access_contract.py).
from tests.test_storage_contract import backend, other_store, store  # noqa: F401  # isort: skip

pytestmark = pytest.mark.anyio

KEY_A = os.urandom(32)
KEY_B = os.urandom(32)
ALICE = CredentialKey("alice", "tracker", "https://auth.example.com")
ALICE_WIKI = CredentialKey("alice", "wiki", "https://auth.example.com")
BOB = CredentialKey("bob", "tracker", "https://auth.example.com")
# Tokens unlike anything else in a database file, so finding one there means it is in clear.
ACCESS = "at-7f3c1e9a-clear-access-token-of-alice"
REFRESH = "rt-52b0d4e8-clear-refresh-token-of-alice"


def clock() -> float:
    return T0


def vault(store: Store, current: bytes = KEY_A, *previous: bytes) -> CredentialVault:
    return CredentialVault(store, Keyring(current, previous), clock)


async def save(v: CredentialVault, key: CredentialKey = ALICE, access: str = ACCESS, **more: Any) -> None:
    await v.save(
        key,
        access=access,
        refresh=more.get("refresh", REFRESH),
        expires_at=more.get("expires_at", T0 + 3600),
        scopes=more.get("scopes", ["issues:read", "issues:write"]),
    )


def raw_database(backend: _Backend) -> bytes:
    """Every byte of the database as its operator can read it: the SQLite file and its journal,
    or each value of PostgreSQL's credentials rows as the server returns them."""
    if isinstance(backend, _SqliteBackend):
        files = [backend.path, Path(f"{backend.path}-wal")]
        return b"".join(path.read_bytes() for path in files if path.exists())
    assert isinstance(backend, _PostgresBackend)
    rows = backend.schema.rows("SELECT * FROM credentials")
    values = [v for row in rows for v in row]
    return b"\0".join(v if isinstance(v, bytes) else str(v).encode() for v in values)


async def test_tokens_come_back_as_saved_and_the_row_holds_only_ciphertexts(store: Store) -> None:
    v = vault(store)
    await save(v)
    await save(v, BOB, "bobs-access", refresh=None, expires_at=None, scopes=[])

    alice = await v.load(ALICE)
    assert alice is not None and (alice.access_token, alice.refresh_token) == (ACCESS, REFRESH)
    assert alice.scopes == ("issues:read", "issues:write") and alice.expires_at == T0 + 3600
    assert ACCESS not in repr(alice) and REFRESH not in repr(alice)
    bob = await v.load(BOB)
    assert bob is not None and (bob.access_token, bob.refresh_token, bob.expires_at) == (
        "bobs-access",
        None,
        None,
    )
    assert await v.load(CredentialKey("carol", "tracker", "https://auth.example.com")) is None

    stored = await store.get_credential(ALICE)
    assert stored is not None and stored.key_id == key_id(KEY_A)
    assert stored.refresh is not None and ACCESS.encode() not in stored.access.ciphertext
    assert [c.key for c in await store.list_credentials(None)] == [ALICE, BOB]
    assert [c.key for c in await store.list_credentials("alice")] == [ALICE]

    # A new authorization replaces the tokens; the row keeps its creation time.
    await save(v, access="a-newer-access-token", scopes=["issues:read"])
    again = await v.load(ALICE)
    assert (
        again is not None
        and again.access_token == "a-newer-access-token"
        and again.scopes == ("issues:read",)
    )
    assert len(await store.list_credentials("alice")) == 1


async def test_the_database_holds_no_token_in_clear(store: Store, backend: _Backend) -> None:
    await save(vault(store))
    assert await store.get_credential(ALICE) is not None
    raw = raw_database(backend)
    assert b"alice" in raw  # what is read is the database that holds the row
    for token in (ACCESS, REFRESH):
        assert token.encode() not in raw and token.encode().hex().encode() not in raw


async def test_a_ciphertext_moved_to_another_row_or_kind_does_not_decrypt(store: Store) -> None:
    v = vault(store)
    await save(v)
    alice = await store.get_credential(ALICE)
    assert alice is not None and alice.refresh is not None

    # Alice's ciphertexts copied onto bob's row, as someone with the database could.
    await store.put_credential(replace(alice, key=BOB))
    with pytest.raises(CredentialError, match="does not decrypt") as moved:
        await v.load(BOB)
    assert ACCESS not in str(moved.value) and "'bob'" in str(moved.value)

    # Her access and refresh ciphertexts swapped within her own row.
    await store.put_credential(replace(alice, access=alice.refresh, refresh=alice.access))
    with pytest.raises(CredentialError, match=r"access token .* does not decrypt"):
        await v.load(ALICE)


async def test_a_rotation_reads_old_rows_reencrypts_them_and_the_old_key_can_go(store: Store) -> None:
    await save(vault(store, KEY_A))
    await save(vault(store, KEY_A), BOB, "bobs-access")

    # The new key is current, the old one still configured: old rows read, new ones use the new key.
    both = vault(store, KEY_B, KEY_A)
    old = await both.load(ALICE)
    assert old is not None and old.access_token == ACCESS
    await save(both, ALICE_WIKI, "wiki-access")

    done = await both.rotate()
    assert (done.resealed, done.current, done.changed, done.unreadable) == (2, 1, 0, ())
    assert {c.key_id for c in await store.list_credentials(None)} == {key_id(KEY_B)}
    assert (await both.rotate()).resealed == 0

    # The old key dropped: everything still opens with the new one alone, nothing with the old.
    alone = vault(store, KEY_B)
    opened = [await alone.load(key) for key in (ALICE, ALICE_WIKI, BOB)]
    assert [c.access_token if c else None for c in opened] == [ACCESS, "wiki-access", "bobs-access"]
    with pytest.raises(CredentialError, match=f"key id {key_id(KEY_B)}, which is not configured"):
        await vault(store, KEY_A).load(ALICE)
    # A row no configured key opens is reported, not dropped.
    assert (await vault(store, os.urandom(32)).rotate()).unreadable == (ALICE, ALICE_WIKI, BOB)


async def test_of_two_processes_claiming_one_refresh_exactly_one_wins(
    store: Store, other_store: Store
) -> None:
    keys = [CredentialKey(f"user{i}", "tracker", "https://auth.example.com") for i in range(8)]
    for key in keys:
        await save(vault(store), key)
    won: dict[tuple[str, CredentialKey], bool] = {}

    async def claim(s: Store, claimant: str, key: CredentialKey) -> None:
        won[claimant, key] = await vault(s).claim_refresh(key, claimant) is not None

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(claim, store, "proc_a", key)
            tg.start_soon(claim, other_store, "proc_b", key)
    assert all(won["proc_a", key] != won["proc_b", key] for key in keys), won

    # The winner spends the refresh token and stores the new tokens; the loser cannot.
    key = keys[0]
    winner, loser = ("proc_a", "proc_b") if won["proc_a", key] else ("proc_b", "proc_a")
    claimed = await vault(store).claim_refresh(key, winner)  # a claimant renews its own claim
    assert claimed is not None and claimed.refresh_token == REFRESH
    assert not await vault(store).finish_refresh(
        claimed, loser, access="stolen", refresh=None, expires_at=None
    )
    assert await vault(store).finish_refresh(
        claimed, winner, access="fresh", refresh=None, expires_at=T0 + 7200
    )
    fresh = await vault(store).load(key)
    assert fresh is not None and (fresh.access_token, fresh.refresh_token) == ("fresh", REFRESH)
    assert fresh.expires_at == T0 + 7200 and fresh.scopes == ("issues:read", "issues:write")
    stored = await store.get_credential(key)
    assert stored is not None and stored.claimed_by is None  # the claim ended with the refresh


async def test_a_claim_that_ran_out_is_taken_over_and_its_late_result_refused(store: Store) -> None:
    await save(vault(store))
    crashed = await vault(store).claim_refresh(ALICE, "proc_a")  # at T0, held until T0 + CLAIM_S
    assert crashed is not None
    within = CredentialVault(store, Keyring(KEY_A), lambda: T0 + CLAIM_S - 1)
    late = CredentialVault(store, Keyring(KEY_A), lambda: T0 + CLAIM_S + 1)
    assert await within.claim_refresh(ALICE, "proc_b") is None
    taken = await late.claim_refresh(ALICE, "proc_b")
    assert taken is not None and taken.refresh_token == REFRESH

    # proc_a comes back after its claim was taken over: what it writes is refused.
    assert not await vault(store).finish_refresh(
        crashed, "proc_a", access="late", refresh="r2", expires_at=None
    )
    assert not await store.release_refresh(ALICE, "proc_a")
    assert await late.release_refresh(ALICE, "proc_b")
    unchanged = await vault(store).load(ALICE)
    assert unchanged is not None and unchanged.access_token == ACCESS


async def test_a_new_authorization_ends_a_refresh_under_way(store: Store) -> None:
    await save(vault(store))
    claimed = await vault(store).claim_refresh(ALICE, "proc_a")
    assert claimed is not None
    await save(vault(store), access="consented-again")
    assert not await vault(store).finish_refresh(
        claimed, "proc_a", access="from-old", refresh=None, expires_at=None
    )
    now = await vault(store).load(ALICE)
    assert now is not None and now.access_token == "consented-again"


async def test_revoking_one_principals_credentials_leaves_everybody_elses(store: Store) -> None:
    v = vault(store)
    for key in (ALICE, ALICE_WIKI, BOB):
        await save(v, key)
    assert await v.revoke("alice", "tracker") == 1
    assert [c.key for c in await store.list_credentials(None)] == [ALICE_WIKI, BOB]
    assert await v.revoke("alice", "tracker") == 0
    assert await v.revoke("alice") == 1
    assert await v.revoke("al") == 0  # a name is matched whole
    assert [c.key for c in await store.list_credentials(None)] == [BOB]
    bob = await v.load(BOB)
    assert bob is not None and bob.access_token == ACCESS


def test_a_token_is_refreshed_a_margin_before_it_expires_and_a_claim_holds_until_it_runs_out() -> None:
    assert not needs_refresh(None, T0)
    assert not needs_refresh(T0 + 61, T0) and needs_refresh(T0 + 60, T0) and needs_refresh(T0 - 5, T0)
    assert may_claim(None, None, "proc_b", T0) and may_claim("proc_b", T0 + 10, "proc_b", T0)
    assert not may_claim("proc_a", T0 + 10, "proc_b", T0) and may_claim("proc_a", T0 - 1, "proc_b", T0)
