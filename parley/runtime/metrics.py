"""What this process did, as Prometheus metrics (served at GET /metrics, parley/server/metrics_route.py).

Counters and histograms are per process (a scrape of each replica; sum them across replicas).
Labels are agents, statuses, providers, models and servers: never a session, turn or user
(cardinality). The registry belongs to the instance, not to the module: no hidden global.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Turns and model calls take seconds to hours; tool calls milliseconds to minutes.
_TURN_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 86400)
_CALL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class RuntimeMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.turns = Counter(
            "parley_turns", "Turns ended, by agent and status.", ["agent", "status"], registry=r
        )
        self.turn_seconds = Histogram(
            "parley_turn_duration_seconds",
            "Time from a turn's start to its end (waits for people included), by agent.",
            ["agent"],
            buckets=_TURN_BUCKETS,
            registry=r,
        )
        self.model_seconds = Histogram(
            "parley_model_call_duration_seconds",
            "Model calls (all attempts of one), by provider and model.",
            ["provider", "model"],
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter(
            "parley_model_tokens",
            "Tokens of model calls, by provider, model and type (input, output, cached).",
            ["provider", "model", "type"],
            registry=r,
        )
        self.tool_calls = Counter(
            "parley_tool_calls",
            "Tool calls run, by server (builtin for parley's own) and outcome.",
            ["server", "status"],
            registry=r,
        )
        self.tool_seconds = Histogram(
            "parley_tool_call_duration_seconds",
            "Tool calls run, by server.",
            ["server"],
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.interrupts = Counter(
            "parley_interrupts_raised", "Approvals and questions raised, by kind.", ["kind"], registry=r
        )
        self.running_turns = Gauge(
            "parley_running_turns", "Turn steps in progress in this process.", registry=r
        )
        self.leases_held = Gauge(
            "parley_leases_held", "Sessions this process holds the lease of (drives) now.", registry=r
        )
        self.webhook_attempts = Counter(
            "parley_webhook_attempts",
            "Webhook delivery attempts, by subscription and outcome (delivered, failed, dead).",
            ["subscription", "outcome"],
            registry=r,
        )
