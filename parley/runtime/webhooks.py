"""The delivery worker of outbound webhooks: one per process, beside the scheduler. It claims
due deliveries from the outbox, POSTs each, signed with the Standard Webhooks scheme, through
the SSRF guard, and writes the outcome: delivered, another attempt after a back-off with jitter,
or dead after the subscription's last attempt (docs/webhooks.md).

Turns never wait for it: a delivery is a row their commit wrote, and the worker's requests run
in its own tasks, each bounded by the subscription's timeout, at most MAX_IN_FLIGHT at once and
MAX_PER_SUBSCRIPTION of one subscription."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio
import httpx2
from anyio.abc import TaskStatus
from standardwebhooks import Webhook

from parley import __version__
from parley.config import WebhookSubscription, secret_from_env
from parley.core.webhooks import DeliveryRecord, OutboxRoute, retry_delay
from parley.runtime.background import log_pass_failure
from parley.runtime.metrics import RuntimeMetrics
from parley.runtime.webhook_guard import ReceiverRefused, pin
from parley.storage.integration_ports import WebhookOutbox
from parley.tls import http_client

logger = logging.getLogger(__name__)

# Deliveries in flight at once in one process, and of one subscription: a slow receiver takes
# at most half the slots, so the others' deliveries still go out.
MAX_IN_FLIGHT = 16
MAX_PER_SUBSCRIPTION = 8
# A claim outlives the attempt's timeout by this much; a process that died mid-attempt leaves a
# claim that lapses, and the delivery is tried again.
CLAIM_MARGIN_S = 30.0
# The longest pause between two looks at the outbox.
MAX_POLL_S = 1.0


def signer(secret: str) -> Webhook:
    """The Standard Webhooks signer of a secret: whsec_<base64> as the scheme writes it, else
    the text's own bytes."""
    return Webhook(secret) if secret.startswith("whsec_") else Webhook(secret.encode())


def routes_of(webhooks: Mapping[str, WebhookSubscription]) -> list[OutboxRoute]:
    return [OutboxRoute(name, frozenset(sub.events)) for name, sub in webhooks.items()]


@dataclass(frozen=True, slots=True)
class Attempt:
    """How one attempt went: delivered, or the error that says why not."""

    delivered: bool
    error: str | None = None


class WebhookWorker:
    def __init__(
        self,
        store: WebhookOutbox,
        webhooks: Mapping[str, WebhookSubscription],
        process_id: str,
        clock: Callable[[], float],
        metrics: RuntimeMetrics,
        poll_s: float,
    ) -> None:
        self._store = store
        self._subs = dict(webhooks)
        self._owner = process_id
        self._clock = clock
        self._metrics = metrics
        self._poll_s = min(poll_s, MAX_POLL_S)
        self._signers: dict[str, Webhook] = {}
        for name, sub in self._subs.items():
            secret = secret_from_env(sub.secret_env)
            if secret:
                self._signers[name] = signer(secret)
            else:
                # Its deliveries stay pending until a process that has the secret sends them.
                logger.warning("webhook %s: %s is not set; its deliveries wait", name, sub.secret_env)
        self._lease_s = max((s.timeout_s for s in self._subs.values()), default=0) + CLAIM_MARGIN_S
        self._in_flight = 0
        self._busy: Counter[str] = Counter()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        # No proxy from the environment: the request must go to the address the guard pinned.
        async with (
            http_client(follow_redirects=False, trust_env=False) as http,
            anyio.create_task_group() as tg,
        ):
            task_status.started()
            while True:
                claimed = await self._claim()
                for delivery in claimed:
                    self._in_flight += 1
                    self._busy[delivery.subscription] += 1
                    tg.start_soon(self._deliver_one, http, delivery)
                if not claimed:
                    await anyio.sleep(self._poll_s)

    async def _claim(self) -> list[DeliveryRecord]:
        """Only as many as can be sent now (a claim left waiting for a slot would lapse), of the
        subscriptions with room, no more than the one with least room can take."""
        open_ = [name for name in self._signers if self._busy[name] < MAX_PER_SUBSCRIPTION]
        limit = min([MAX_IN_FLIGHT - self._in_flight] + [MAX_PER_SUBSCRIPTION - self._busy[n] for n in open_])
        if limit <= 0 or not open_:
            return []
        try:
            return await self._store.claim_deliveries(open_, self._owner, self._clock(), self._lease_s, limit)
        except Exception:
            log_pass_failure(logger, "reading the webhook outbox")
            return []

    async def _deliver_one(self, http: httpx2.AsyncClient, delivery: DeliveryRecord) -> None:
        try:
            sub = self._subs[delivery.subscription]
            attempt = await self.attempt(http, sub, delivery)
            await self._settle(sub, delivery, attempt)
        except Exception:
            # The claim lapses and another look tries again.
            logger.warning("webhook delivery %s failed unexpectedly", delivery.id, exc_info=True)
        finally:
            self._in_flight -= 1
            self._busy[delivery.subscription] -= 1

    async def attempt(
        self, http: httpx2.AsyncClient, sub: WebhookSubscription, delivery: DeliveryRecord
    ) -> Attempt:
        try:
            target = await pin(sub.url, allow_private=sub.allow_private)
        except ReceiverRefused as exc:
            return Attempt(False, str(exc))
        now = self._clock()
        signature = self._signers[delivery.subscription].sign(
            delivery.id, datetime.fromtimestamp(now, UTC), delivery.payload
        )
        headers = {
            "host": target.host_header,
            "content-type": "application/json",
            "user-agent": f"parley/{__version__}",
            "webhook-id": delivery.id,
            "webhook-timestamp": str(int(now)),
            "webhook-signature": signature,
        }
        extensions = {"sni_hostname": target.server_name} if target.server_name else {}
        try:
            with anyio.fail_after(sub.timeout_s):
                # Streamed and never read: a receiver's answer is its status alone, whatever it sends.
                async with http.stream(
                    "POST",
                    target.url,
                    content=delivery.payload.encode(),
                    headers=headers,
                    extensions=extensions,
                    timeout=sub.timeout_s,
                ) as response:
                    status = response.status_code
        except TimeoutError:
            return Attempt(False, f"no answer within {sub.timeout_s:g}s")
        except httpx2.HTTPError as exc:
            return Attempt(False, f"{type(exc).__name__}: {exc}")
        if 200 <= status < 300:
            return Attempt(True)
        if 300 <= status < 400:
            return Attempt(False, f"HTTP {status}: redirects are not followed")
        return Attempt(False, f"HTTP {status}")

    async def _settle(self, sub: WebhookSubscription, delivery: DeliveryRecord, attempt: Attempt) -> None:
        now = self._clock()
        name = delivery.subscription
        if attempt.delivered:
            await self._store.settle_delivery(delivery.id, self._owner, "delivered", now)
            self._metrics.webhook_attempts.labels(name, "delivered").inc()
            return
        attempts = delivery.attempts + 1
        if attempts >= sub.max_attempts:
            await self._store.settle_delivery(delivery.id, self._owner, "dead", now, error=attempt.error)
            self._metrics.webhook_attempts.labels(name, "dead").inc()
            logger.warning(
                "webhook delivery %s to %s is dead after %d attempts: %s",
                delivery.id,
                name,
                attempts,
                attempt.error,
            )
            return
        delay = retry_delay(attempts, sub.retry_base_s, sub.retry_max_s, random.random())
        await self._store.settle_delivery(
            delivery.id, self._owner, "pending", now, next_attempt_at=now + delay, error=attempt.error
        )
        self._metrics.webhook_attempts.labels(name, "failed").inc()
