"""`parley webhooks list` and `parley webhooks redeliver`: the outbox of outbound webhooks on the
database directly, as an operator (docs/webhooks.md)."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime

import anyio

from parley.cli_common import load_from_args
from parley.core.webhooks import DELIVERY_STATUSES, DeliveryRecord, DeliveryStatus
from parley.storage.ports import Store


def add_webhooks_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> list[argparse.ArgumentParser]:
    """`parley webhooks list|redeliver`; returns the parsers that open the store."""
    webhooks = sub.add_parser("webhooks", help="outbound webhook deliveries: list them, send one again")
    wsub = webhooks.add_subparsers(dest="action", required=True)
    lst = wsub.add_parser("list", help="deliveries, newest first")
    lst.add_argument("--status", choices=DELIVERY_STATUSES, help="only deliveries with this status")
    lst.add_argument("--limit", type=int, default=50, help="show at most this many (default 50)")
    redeliver = wsub.add_parser(
        "redeliver",
        help="send a delivery again (a dead one too): same id and payload, attempts counted afresh",
    )
    redeliver.add_argument("delivery_id", help="the delivery's id (whd_...), as `parley webhooks list` shows")
    for parser in (lst, redeliver):
        parser.set_defaults(func=run_webhooks)
    return [lst, redeliver]


def _when(at: float | None) -> str:
    return "-" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _line(d: DeliveryRecord) -> str:
    error = f"  {d.last_error}" if d.last_error else ""
    return (
        f"{d.id}  {d.status:<9}  {d.subscription}  {d.event_type}  {d.session_id or '-'}  "
        f"attempts {d.attempts}  created {_when(d.created_at)}{error}"
    )


async def _list(store: Store, status: DeliveryStatus | None, limit: int) -> int:
    found = await store.list_deliveries(status, limit)
    if not found:
        print("no deliveries" + (f" with status {status}" if status else ""))
    for delivery in found:
        print(_line(delivery))
    return 0


async def _redeliver(store: Store, delivery_id: str) -> int:
    again = await store.redeliver(delivery_id, time.time())
    if again is None:
        print(f"parley: no delivery {delivery_id[:80]!r}; `parley webhooks list` shows them", file=sys.stderr)
        return 1
    print(f"{again.id} is pending again; a running parley sends it at its next look")
    return 0


def run_webhooks(args: argparse.Namespace) -> int:
    from parley.stores import open_store

    config = load_from_args(args)
    if args.action == "list" and not 1 <= args.limit <= 10_000:
        print("parley: --limit must be 1 to 10000", file=sys.stderr)
        return 2

    async def run() -> int:
        async with open_store(config) as opened:
            if args.action == "list":
                return await _list(opened.store, args.status, args.limit)
            return await _redeliver(opened.store, args.delivery_id)

    return anyio.run(run)
