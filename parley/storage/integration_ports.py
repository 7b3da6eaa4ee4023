"""The ports of the parts that reach outside parley: the outbox of outbound webhooks, schedules,
users' stored credentials and their OAuth flows. `Store` (ports.py) holds them with the rest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from parley.core.credentials import CredentialKey, Sealed, StoredCredential
from parley.core.oauth_flows import OAuthFlow
from parley.core.schedules import Schedule, TickRecord, TickStatus
from parley.core.webhooks import DeliveryRecord, DeliveryStatus, OutboxRoute


class WebhookOutbox(Protocol):
    """The outbox of outbound webhooks: deliveries written with the events they tell of (each
    decision's, for the subscriptions routed), claimed by one process at a time."""

    def route_webhooks(self, routes: Sequence[OutboxRoute]) -> None:
        """The subscriptions whose deliveries decisions write from now on."""
        ...

    async def claim_deliveries(
        self, subscriptions: Sequence[str], owner: str, now: float, lease_s: float, limit: int
    ) -> list[DeliveryRecord]:
        """Pending deliveries of `subscriptions` that are due and unclaimed (or whose claim
        lapsed), claimed for `owner`."""
        ...

    async def settle_delivery(
        self,
        delivery_id: str,
        owner: str,
        status: DeliveryStatus,
        now: float,
        *,
        next_attempt_at: float | None = None,
        error: str | None = None,
    ) -> bool:
        """An attempt's outcome (one more attempt counted); False: `owner` no longer held the claim."""
        ...

    async def list_deliveries(self, status: DeliveryStatus | None, limit: int) -> list[DeliveryRecord]: ...

    async def redeliver(self, delivery_id: str, now: float) -> DeliveryRecord | None:
        """A delivery made pending and due again, with the same id and payload (None: no such id)."""
        ...

    async def delivery_counts(self) -> dict[str, int]:
        """Deliveries by status, database-wide."""
        ...


class ScheduleStore(Protocol):
    """The schedules made with the tools, and the ticks claimed of every schedule."""

    async def create_schedule(self, schedule: Schedule) -> bool:
        """Store a new schedule; False (nothing written) when the name is taken."""
        ...

    async def list_schedules(self) -> list[Schedule]: ...

    async def set_schedule_paused(self, name: str, paused: bool) -> bool:
        """False when there is no schedule of that name."""
        ...

    async def delete_schedule(self, name: str) -> bool:
        """The schedule and its ticks; False when there is no schedule of that name."""
        ...

    async def latest_ticks(self) -> dict[str, tuple[TickRecord, str | None]]:
        """Per schedule, its latest claimed tick and the status of the session of its latest
        tick that started one (None: none did, or it is gone)."""
        ...

    async def queued_ticks(self) -> list[TickRecord]:
        """The ticks waiting for their schedule's previous session (overlap queue)."""
        ...

    async def claim_tick(self, schedule: str, tick_at: float, status: TickStatus, now: float) -> bool:
        """Claim a tick that starts no session now (skipped or queued); False when it was claimed."""
        ...

    async def prune_ticks(self, before: float) -> int:
        """Delete ticks claimed before `before`, except each schedule's latest and queued ones."""
        ...


class CredentialStore(Protocol):
    """Each principal's credentials for downstream servers, by (principal, server, issuer): the
    ciphertexts only (parley/runtime/credentials.py seals and opens them), and the claim that lets
    one process at a time refresh a credential."""

    async def put_credential(self, credential: StoredCredential) -> None:
        """Store the credential, replacing the one of its key (whose creation time stays) and
        ending any refresh claim on it."""
        ...

    async def get_credential(self, key: CredentialKey) -> StoredCredential | None: ...

    async def list_credentials(self, principal: str | None) -> list[StoredCredential]:
        """The credentials of `principal` (None: of everybody), by principal, server and issuer."""
        ...

    async def delete_credentials(self, principal: str, server: str | None) -> int:
        """Delete the credentials of `principal` (for `server` only, unless None), nobody else's;
        return how many."""
        ...

    async def claim_refresh(
        self, key: CredentialKey, claimant: str, now: float, claim_s: float
    ) -> StoredCredential | None:
        """Claim the credential's refresh for `claimant` until `now + claim_s`, in one atomic
        step: of two claimants at once exactly one gets it. Returns the credential as claimed;
        None when there is none, or another claimant holds an unexpired claim."""
        ...

    async def finish_refresh(self, credential: StoredCredential, claimant: str) -> bool:
        """Write a refreshed credential (its tokens, scopes, expiry, update time) and end the
        claim, only while `claimant` still holds it; False (nothing written) otherwise."""
        ...

    async def release_refresh(self, key: CredentialKey, claimant: str) -> bool:
        """End `claimant`'s claim with the tokens left as they are (the refresh failed)."""
        ...

    async def reseal_credential(self, credential: StoredCredential, previous: Sealed) -> bool:
        """Replace the ciphertexts and key id of a credential (a key rotation), only while its
        access ciphertext is still `previous`; False when it changed meanwhile or is gone."""
        ...


class OAuthFlowStore(Protocol):
    """Pending authorizations at downstream servers (core/oauth_flows.py), each used once."""

    async def put_flow(self, flow: OAuthFlow) -> None:
        """Store a new flow (no state, binding or verifier yet)."""
        ...

    async def get_flow(self, flow_id: str) -> OAuthFlow | None: ...

    async def flow_by_state(self, state_digest: str) -> OAuthFlow | None: ...

    async def start_flow(self, flow: OAuthFlow, now: float) -> bool:
        """Write the flow's state digest, browser binding, issuer, scopes and sealed verifier, while
        it is unused and unexpired at `now`; False (nothing written) otherwise."""
        ...

    async def live_flows(self, principal: str, server: str, now: float) -> list[OAuthFlow]:
        """The unused, unexpired flows of `principal` for `server`, oldest first."""
        ...

    async def close_flow(self, flow_id: str, now: float) -> bool:
        """Mark the flow used without a callback (another flow connected the account); False when
        it was used already."""
        ...

    async def use_flow(self, flow_id: str, state_digest: str, now: float) -> bool:
        """Mark the flow used, once: True only for the first use, while it still has this state
        and is unexpired at `now`."""
        ...

    async def registered_client(self, server: str, issuer: str) -> str | None:
        """The client id parley registered dynamically at `issuer` for `server`, if any."""
        ...

    async def keep_registered_client(self, server: str, issuer: str, client_id: str, now: float) -> str:
        """Keep `client_id` unless one is kept already (another replica registered first); the
        client id kept, which every replica then uses."""
        ...
