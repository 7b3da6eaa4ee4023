"""GET /metrics: Prometheus text format, behind the bearer gate with `parley:metrics` (or
`parley:admin`) when the HTTP surface authenticates (see auth_gate.py).

Two kinds of series: this process's counters, histograms and gauges (parley/runtime/metrics.py;
sum them across replicas), and database-wide gauges computed at each scrape from the shared
database, labelled `scope="database"`: every replica reports the same value, so take one
replica's (max, not sum). Nothing is labelled by session, turn or user.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from parley.core.records import DatabaseCounts, InterruptRecord
from parley.core.webhooks import DELIVERY_STATUSES
from parley.errors import StorageError
from parley.runtime.metrics import RuntimeMetrics
from parley.server.auth_gate import METRICS_PATH

# How many pending interrupts one scrape reads (the oldest first); more are counted as this many.
MAX_PENDING_READ = 10_000
# Ages of pending interrupts: (label, upper bound in seconds).
AGE_BUCKETS = (("lt_1m", 60.0), ("lt_1h", 3600.0), ("lt_1d", 86400.0), ("ge_1d", float("inf")))


@dataclass(frozen=True, slots=True)
class MetricsSources:
    """What a scrape reads besides the process's own series."""

    runtime: RuntimeMetrics
    pending_interrupts: Callable[[int], Awaitable[list[InterruptRecord]]]
    database_counts: Callable[[float], Awaitable[DatabaseCounts]]
    downstream_connections: Callable[[], int]
    connection_errors: Mapping[str, int]
    # Webhook deliveries by status (pending is the queue's depth), database-wide.
    webhook_counts: Callable[[], Awaitable[dict[str, int]]] | None = None


class _Snapshot(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def _pending_by_age(pending: list[InterruptRecord], now: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "parley_pending_interrupts",
        "Approvals and questions waiting for a person, by kind and age (database-wide).",
        labels=["scope", "kind", "age"],
    )
    counts: dict[tuple[str, str], int] = {}
    for interrupt in pending:
        age = now - interrupt.created_at
        label = next(name for name, bound in AGE_BUCKETS if age < bound)
        counts[(interrupt.kind, label)] = counts.get((interrupt.kind, label), 0) + 1
    for kind in ("approval", "question", "authorization_required"):
        for label, _ in AGE_BUCKETS:
            family.add_metric(["database", kind, label], counts.get((kind, label), 0))
    return family


def _database(counts: DatabaseCounts) -> list[Metric]:
    sessions = GaugeMetricFamily(
        "parley_sessions", "Sessions by status (database-wide).", labels=["scope", "status"]
    )
    for status, count in sorted(counts.sessions.items()):
        sessions.add_metric(["database", status], count)
    parked = GaugeMetricFamily(
        "parley_parked_sessions",
        "Sessions waiting for a person (status waiting_for_input; database-wide).",
        labels=["scope"],
    )
    parked.add_metric(["database"], counts.sessions.get("waiting_for_input", 0))
    queued = GaugeMetricFamily(
        "parley_queued_messages", "Messages queued for a turn (database-wide).", labels=["scope"]
    )
    queued.add_metric(["database"], counts.queued_messages)
    leases = GaugeMetricFamily(
        "parley_leases", "Session leases held by any process now (database-wide).", labels=["scope"]
    )
    leases.add_metric(["database"], counts.leases)
    tasks = GaugeMetricFamily(
        "parley_mcp_tasks", "MCP tasks by status (database-wide).", labels=["scope", "status"]
    )
    for status, count in sorted(counts.tasks.items()):
        tasks.add_metric(["database", status], count)
    return [sessions, parked, queued, leases, tasks]


def _deliveries(counts: dict[str, int]) -> Metric:
    family = GaugeMetricFamily(
        "parley_webhook_deliveries",
        "Webhook deliveries by status: pending (the queue), delivered, dead (database-wide).",
        labels=["scope", "status"],
    )
    for status in DELIVERY_STATUSES:
        family.add_metric(["database", status], counts.get(status, 0))
    return family


def metrics_route(sources: MetricsSources) -> Route:
    async def metrics(request: Request) -> Response:
        now = time.time()
        database: list[Metric] = []
        try:
            pending = await sources.pending_interrupts(MAX_PENDING_READ)
            database = [_pending_by_age(pending, now), *_database(await sources.database_counts(now))]
            if sources.webhook_counts is not None:
                database.append(_deliveries(await sources.webhook_counts()))
        except StorageError:
            pass  # the database does not answer (see /healthz): the process's own series still go out
        connections = GaugeMetricFamily(
            "parley_downstream_connections", "Open connections to downstream MCP servers (this process)."
        )
        connections.add_metric([], sources.downstream_connections())
        errors = CounterMetricFamily(
            "parley_downstream_connection_errors",
            "Connections to downstream MCP servers that could not be made, by server (this process).",
            labels=["server"],
        )
        for server, count in sorted(sources.connection_errors.items()):
            errors.add_metric([server], count)
        scraped = CollectorRegistry()
        families = [*database, connections, errors]
        scraped.register(_Snapshot(families))
        body = generate_latest(sources.runtime.registry) + generate_latest(scraped)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return Route(METRICS_PATH, metrics, methods=["GET"])
