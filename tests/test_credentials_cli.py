"""`parley credentials` on a real database (a SQLite file, and a schema of the test PostgreSQL
server): `list` shows whose credentials are stored and never a token, `revoke` deletes one
principal's (audited) and nobody else's, `new-key` prints a key, `rotate-key` re-encrypts
everything under the current key; a missing, too open or malformed key is a clear error naming
its field. `parley db copy` carries the credentials over to PostgreSQL, still encrypted."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
import yaml

from parley.cli import main as parley_main
from parley.config import load_config
from parley.config.credentials import decode_key
from parley.core.credentials import CredentialKey
from parley.runtime.credentials import CredentialVault, Keyring, key_id, new_key
from parley.storage.ports import Store
from parley.stores import open_store
from tests.postgres_support import schema_for_test
from tests.support import Database

pytestmark = pytest.mark.anyio

CURRENT_ENV = "PARLEY_TEST_CREDENTIALS_KEY"
PREVIOUS_ENV = "PARLEY_TEST_CREDENTIALS_OLD_KEY"
ISSUER = "https://auth.example.com"
ALICE = CredentialKey("alice", "tracker", ISSUER)
ALICE_WIKI = CredentialKey("alice", "wiki", ISSUER)
BOB = CredentialKey("bob", "tracker", ISSUER)
EXPIRES = 1_900_000_000.0  # 2030-03-17 17:46:40 UTC
BOTH = pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)


def token_of(key: CredentialKey, kind: str) -> str:
    return f"{kind}-token-{key.principal}-{key.server}-5f1e0c"


def write_config(directory: Path, database: Database, **credentials: Any) -> Path:
    path = directory / "parley.yaml"
    body: dict[str, Any] = {"storage": database.storage()}
    if credentials:
        body["credentials"] = credentials
    path.write_text(yaml.safe_dump(body))
    return path


async def cli(config: Path, database: Database, *argv: str) -> int:
    """The command line on the test's database, in a thread (it runs an event loop of its own)."""
    db = ["--db", database.db_arg] if database.db_arg else []
    return await anyio.to_thread.run_sync(parley_main, [*argv, "--config", str(config), *db])


@asynccontextmanager
async def opened(config: Path, database: Database) -> AsyncIterator[Store]:
    async with open_store(load_config(config, database.db_arg)) as store:
        yield store.store


async def seed(config: Path, database: Database, key: bytes, *keys: CredentialKey) -> None:
    async with opened(config, database) as store:
        vault = CredentialVault(store, Keyring(key))
        for k in keys:
            expires = None if k.server == "wiki" else EXPIRES
            scopes = ["issues:read", "issues:write"] if k.server == "tracker" else []
            access, refresh = token_of(k, "access"), token_of(k, "refresh")
            await vault.save(k, access=access, refresh=refresh, expires_at=expires, scopes=scopes)


async def load_all(config: Path, database: Database, keyring: Keyring) -> dict[CredentialKey, str]:
    async with opened(config, database) as store:
        vault = CredentialVault(store, keyring)
        found = {}
        for stored in await store.list_credentials(None):
            clear = await vault.load(stored.key)
            assert clear is not None
            found[stored.key] = clear.access_token
        return found


def test_new_key_prints_a_fresh_key_that_the_configuration_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert parley_main(["credentials", "new-key"]) == 0
    assert parley_main(["credentials", "new-key"]) == 0
    first, second = capsys.readouterr().out.split()
    assert first != second and decode_key(first) is not None and decode_key(second) is not None


@BOTH
async def test_list_shows_whose_credentials_for_what_and_never_a_token(
    database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, database)
    await seed(config, database, os.urandom(32), ALICE, ALICE_WIKI, BOB)

    assert await cli(config, database, "credentials", "list") == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        f"alice  tracker  {ISSUER}  scopes issues:read issues:write  expires 2030-03-17 17:46:40Z",
        f"alice  wiki  {ISSUER}  scopes -  expires never",
        f"bob  tracker  {ISSUER}  scopes issues:read issues:write  expires 2030-03-17 17:46:40Z",
    ]
    assert "token" not in out

    assert await cli(config, database, "credentials", "list", "bob") == 0
    assert await cli(config, database, "credentials", "list", "carol") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"bob  tracker  {ISSUER}  scopes issues:read issues:write  expires 2030-03-17 17:46:40Z",
        "no credentials of carol",
    ]


@BOTH
async def test_revoke_deletes_one_principals_credentials_and_nobody_elses_audited(
    database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, database)
    key = os.urandom(32)
    await seed(config, database, key, ALICE, ALICE_WIKI, BOB)

    assert await cli(config, database, "credentials", "revoke", "alice", "tracker") == 0
    assert await cli(config, database, "credentials", "revoke", "alice") == 0
    assert await cli(config, database, "credentials", "revoke", "alice") == 0
    assert capsys.readouterr().out.splitlines() == [
        "revoked 1 credential of alice for tracker",
        "revoked 1 credential of alice",
        "revoked 0 credentials of alice",
    ]
    assert await load_all(config, database, Keyring(key)) == {BOB: token_of(BOB, "access")}

    async with opened(config, database) as store:
        trail = await store.list_audit(None, "cli", None, 10)
    assert [(e.action, e.target, e.detail) for e in reversed(trail)] == [
        ("revoke_credentials", "alice", {"via": "cli", "server": "tracker", "revoked": 1}),
        ("revoke_credentials", "alice", {"via": "cli", "revoked": 1}),
        ("revoke_credentials", "alice", {"via": "cli", "revoked": 0}),
    ]


@BOTH
async def test_rotate_key_reencrypts_under_the_new_key_and_the_old_one_can_go(
    database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = new_key(), new_key()
    old_bytes, new_bytes = decode_key(old), decode_key(new)
    assert old_bytes is not None and new_bytes is not None
    config = write_config(tmp_path, database, key_env=CURRENT_ENV, previous_keys_env=[PREVIOUS_ENV])
    await seed(config, database, old_bytes, ALICE, BOB)
    monkeypatch.setenv(CURRENT_ENV, new)
    monkeypatch.setenv(PREVIOUS_ENV, old)

    assert await cli(config, database, "credentials", "rotate-key") == 0
    assert capsys.readouterr().out.strip() == (
        f"re-encrypted 2 credential(s) under key {key_id(new_bytes)}; 0 were under it already"
    )
    # The old key dropped from the configuration: everything opens with the new key alone.
    config = write_config(tmp_path, database, key_env=CURRENT_ENV)
    assert await cli(config, database, "credentials", "rotate-key") == 0
    assert "re-encrypted 0 credential(s)" in capsys.readouterr().out
    expected = {key: token_of(key, "access") for key in (ALICE, BOB)}
    assert await load_all(config, database, Keyring(new_bytes)) == expected

    # A key that opens none of them: each is named, nothing is lost, the command fails.
    monkeypatch.setenv(CURRENT_ENV, new_key())
    assert await cli(config, database, "credentials", "rotate-key") == 1
    err = capsys.readouterr().err
    assert "the credential of alice for tracker" in err and "the credential of bob for tracker" in err
    assert "previous_keys_env" in err
    assert await load_all(config, database, Keyring(new_bytes)) == expected


def _rotate_errors(config: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert parley_main(["credentials", "rotate-key", "--config", str(config)]) == 2
    return capsys.readouterr().err


def test_a_missing_too_open_or_malformed_key_is_an_error_naming_its_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    database = Database(path=tmp_path / "parley.db")
    monkeypatch.delenv(CURRENT_ENV, raising=False)
    err = _rotate_errors(write_config(tmp_path, database, key_env=CURRENT_ENV), capsys)
    assert f"credentials.key_env: environment variable {CURRENT_ENV} is not set" in err
    assert "parley credentials new-key" in err

    key_file = tmp_path / "credentials.key"
    key_file.write_text(new_key() + "\n")
    key_file.chmod(0o644)
    config = write_config(tmp_path, database, key_file="credentials.key")
    err = _rotate_errors(config, capsys)
    assert f"credentials.key_file: key file {key_file} is readable by others (mode 0644)" in err
    assert f"chmod 600 {key_file}" in err
    # `parley check` says the same.
    assert parley_main(["check", str(config), "--offline"]) == 1
    assert "credentials.key_file" in capsys.readouterr().out
    key_file.chmod(0o600)
    assert parley_main(["credentials", "rotate-key", "--config", str(config)]) == 0
    capsys.readouterr()

    malformed = "c2hvcnQ"  # base64, but of 5 bytes
    monkeypatch.setenv(PREVIOUS_ENV, malformed)
    err = _rotate_errors(
        write_config(tmp_path, database, key_file="credentials.key", previous_keys_env=[PREVIOUS_ENV]), capsys
    )
    assert (
        f"credentials.previous_keys_env.0: the key in {PREVIOUS_ENV} is not 32 bytes of URL-safe base64"
        in err
    )
    assert malformed not in err

    err = _rotate_errors(
        write_config(tmp_path, database, key_env=CURRENT_ENV, key_file="credentials.key"), capsys
    )
    assert "credentials" in err and "give key_env or key_file, one of them" in err
    err = _rotate_errors(write_config(tmp_path, database), capsys)
    assert "credentials: not configured: add credentials: {key_env: NAME}" in err


async def test_db_copy_carries_the_credentials_to_postgresql_still_encrypted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    key = os.urandom(32)
    lite = Database(path=tmp_path / "lite.db")
    for folder in ("lite", "pg"):
        (tmp_path / folder).mkdir()
    await seed(write_config(tmp_path / "lite", lite), lite, key, ALICE, BOB)
    with schema_for_test(postgres_url, "credentials_copy") as schema:
        pg = Database(url=postgres_url, schema=schema.schema)
        config = write_config(tmp_path / "pg", pg)
        argv = ["db", "copy", "--from", str(lite.path), "--to", postgres_url, "--config", str(config)]
        assert await anyio.to_thread.run_sync(parley_main, argv) == 0
        assert ["2", "credentials"] in [line.split() for line in capsys.readouterr().out.splitlines()]
        copied = await load_all(config, pg, Keyring(key))
    assert copied == {key: token_of(key, "access") for key in (ALICE, BOB)}
