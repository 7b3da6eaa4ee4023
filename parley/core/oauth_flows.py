"""A pending authorization of one principal at one downstream server (runtime/oauth/): the
record the store keeps, and the rules of its use. A flow is made when a call parks for want of a
credential; its owner's browser opens it (the connect step binds it to that browser and gives it
a state), and the authorization server's redirect back uses it once, before it expires."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from parley.core.credentials import Sealed

# How long a connect link and the authorization it starts stay usable.
FLOW_S = 600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class OAuthFlow:
    """One flow: whose, for which server, which parked call's interrupt it resolves. The state and
    the browser binding are kept as digests, the PKCE verifier encrypted (never in clear); they are
    set when the owner connects."""

    id: str
    principal: str
    server: str
    session_id: str
    interrupt_id: str
    created_at: float
    expires_at: float
    scopes: tuple[str, ...] = ()
    state_digest: str | None = None
    binding_digest: str | None = None
    issuer: str | None = None
    key_id: str | None = None
    verifier: Sealed | None = None
    used_at: float | None = None

    def live(self, now: float) -> bool:
        """Unused and unexpired."""
        return self.used_at is None and now < self.expires_at


def same_digest(stored: str | None, presented: str) -> bool:
    """Whether a presented value's digest is the stored one, compared in constant time."""
    return stored is not None and hmac.compare_digest(stored.encode(), presented.encode())
