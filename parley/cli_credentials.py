"""`parley credentials list|revoke|new-key|rotate-key`: the per-principal credentials for
downstream servers, on the database directly, as an operator (docs/credentials.md). Nothing here
prints a token: a listing shows whose, for what, the scopes and the expiry."""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from datetime import UTC, datetime

import anyio

from parley.cli_common import load_from_args
from parley.config.loading import credential_keys
from parley.core.credentials import StoredCredential
from parley.runtime import audit
from parley.runtime.access import cli_principal
from parley.runtime.audit import Audit
from parley.runtime.credentials import CredentialVault, Keyring, new_key
from parley.storage.ports import Store


def add_credentials_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> list[argparse.ArgumentParser]:
    """`parley credentials ...`; returns the parsers that open the store."""
    credentials = sub.add_parser(
        "credentials", help="per-principal credentials for downstream servers: list, revoke, keys"
    )
    csub = credentials.add_subparsers(dest="action", required=True)
    lst = csub.add_parser("list", help="whose credentials are stored, for which server: never a token")
    lst.add_argument("principal", nargs="?", help="only this principal's")
    revoke = csub.add_parser(
        "revoke", help="delete a principal's credentials (of one server, or all of them); audited"
    )
    revoke.add_argument("principal", help="whose credentials")
    revoke.add_argument("server", nargs="?", help="only those for this server (a name of mcp_servers)")
    new = csub.add_parser("new-key", help="print a fresh key for credentials.key_env or key_file")
    new.set_defaults(func=_cmd_new_key)
    rotate = csub.add_parser(
        "rotate-key", help="encrypt every credential again under the current key (after adding a new one)"
    )
    for parser in (lst, revoke, rotate):
        parser.set_defaults(func=run_credentials)
    return [lst, revoke, rotate]


def _cmd_new_key(args: argparse.Namespace) -> int:
    print(new_key())
    return 0


def _when(at: float | None) -> str:
    return "never" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _line(c: StoredCredential) -> str:
    scopes = " ".join(c.scopes) or "-"
    return (
        f"{c.key.principal}  {c.key.server}  {c.key.issuer}  scopes {scopes}  expires {_when(c.expires_at)}"
    )


async def _list(store: Store, principal: str | None) -> int:
    found = await store.list_credentials(principal)
    if not found:
        print("no credentials" + (f" of {principal}" if principal else ""))
    for credential in found:
        print(_line(credential))
    return 0


async def _revoke(store: Store, principal: str, server: str | None) -> int:
    revoked = await store.delete_credentials(principal, server)
    await Audit(store, time.time).record(
        cli_principal(getpass.getuser()),
        audit.REVOKE_CREDENTIALS,
        session_id=None,
        target=principal,
        via="cli",
        server=server,
        revoked=revoked,
    )
    whose = f"{principal} for {server}" if server else principal
    print(f"revoked {revoked} credential{'' if revoked == 1 else 's'} of {whose}")
    return 0


async def _rotate(store: Store, keyring: Keyring) -> int:
    done = await CredentialVault(store, keyring).rotate()
    await Audit(store, time.time).record(
        cli_principal(getpass.getuser()),
        audit.ROTATE_KEY,
        session_id=None,
        via="cli",
        key_id=keyring.current_id,
        resealed=done.resealed,
        unreadable=len(done.unreadable) or None,
    )
    print(
        f"re-encrypted {done.resealed} credential(s) under key {keyring.current_id}; "
        f"{done.current} were under it already"
        + (f"; {done.changed} changed meanwhile (written under the current key)" if done.changed else "")
    )
    if done.unreadable:
        for key in done.unreadable:
            print(
                f"parley: the credential of {key.principal} for {key.server} ({key.issuer}) opens with no "
                "configured key",
                file=sys.stderr,
            )
        print(
            "parley: keep their key in credentials.previous_keys_env (or previous_key_files) and run "
            "rotate-key again, or revoke them",
            file=sys.stderr,
        )
        return 1
    return 0


def run_credentials(args: argparse.Namespace) -> int:
    from parley.stores import open_store

    config = load_from_args(args)
    # A missing or bad key is refused before the database is opened.
    keyring = Keyring.of(credential_keys(config)) if args.action == "rotate-key" else None

    async def run() -> int:
        async with open_store(config) as opened:
            if args.action == "list":
                return await _list(opened.store, args.principal)
            if args.action == "revoke":
                return await _revoke(opened.store, args.principal, args.server)
            assert keyring is not None
            return await _rotate(opened.store, keyring)

    return anyio.run(run)
