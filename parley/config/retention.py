"""The `retention:` block of parley.yaml: how long sessions and events are kept. Nothing is
removed unless an age is set; ages are days and take fractions (0.0001 days is under 9 s), so
tests run a policy in seconds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_DAYS_MAX = 36_500


class RetentionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ended_sessions_after_days: float | None = Field(
        None,
        gt=0,
        le=_DAYS_MAX,
        description="Delete closed, completed and failed sessions this many days after their last change "
        "(with their transcript, events and tasks; the audit keeps the fact).",
    )
    idle_sessions_after_days: float | None = Field(
        None,
        gt=0,
        le=_DAYS_MAX,
        description=(
            "Delete idle sessions (no turn running or waiting) this many days after their last change."
        ),
    )
    events_after_days: float | None = Field(
        None,
        gt=0,
        le=_DAYS_MAX,
        description="Delete events (the /v1 streams' history) older than this many days, of sessions not running a "
        "turn; transcripts stay. A stream resumed from before the cut starts with a reset.",
    )
    webhook_deliveries_after_days: float | None = Field(
        None,
        gt=0,
        le=_DAYS_MAX,
        description="Delete delivered and dead webhook deliveries this many days after their last attempt "
        "(pending ones always stay; `parley webhooks list` shows what is kept).",
    )
    interval_s: float = Field(600.0, ge=0.1, le=86_400, description="Seconds between two sweeps.")
    batch_size: int = Field(
        100, ge=1, le=10_000, description="Rows of one kind removed per transaction (each batch is short)."
    )

    @property
    def enabled(self) -> bool:
        return any(
            age is not None
            for age in (
                self.ended_sessions_after_days,
                self.idle_sessions_after_days,
                self.events_after_days,
                self.webhook_deliveries_after_days,
            )
        )
