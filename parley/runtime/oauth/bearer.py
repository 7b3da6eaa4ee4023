"""The bearer tokens requests to user_oauth servers carry, one principal at a time: the
principal's stored credential, refreshed before it expires by one replica at a time (the vault's
refresh claim), and dropped from use when the server answers 401. Also each server's discovery
and client identity, found once per process and shared by the flows."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import anyio
import httpx2

from parley.config import McpServerConfig
from parley.core.credentials import needs_refresh
from parley.errors import CredentialError, OAuthClientError
from parley.runtime.credentials import ClearCredential, CredentialVault
from parley.runtime.oauth.client import ClientIdentity, RegisteredClients, Registration, refresh, register
from parley.runtime.oauth.discovery import DISCOVERY_TIMEOUT_S, Discovered, discover
from parley.tls import http_client

logger = logging.getLogger(__name__)

# How long a server's discovery is reused before it is done again.
DISCOVERY_TTL_S = 3600.0


@dataclass(slots=True)
class _Authority:
    found: Discovered
    identity: ClientIdentity
    at: float


@dataclass(slots=True)
class _ServerState:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    authority: _Authority | None = None
    # Digests of the access tokens the server answered 401 to, by principal.
    rejected: dict[str, str] = field(default_factory=dict)
    # Held while this process refreshes a principal's token, by principal.
    refreshing: dict[str, anyio.Lock] = field(default_factory=dict)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DownstreamAuth:
    """One per process, for the servers with auth user_oauth."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        vault: CredentialVault,
        public_base: str,
        claimant: str,
        clock: Callable[[], float] = time.time,
        clients: RegisteredClients | None = None,
    ) -> None:
        self._servers = {name: cfg for name, cfg in servers.items() if cfg.auth is not None}
        # Where dynamically registered clients are kept (None: in this process only).
        self._clients = clients
        self._vault = vault
        self.public_base = public_base
        # Whether public_base is parley's own listener on 127.0.0.1 (no public URL).
        self.loopback = False
        self._claimant = claimant
        self._clock = clock
        self._state = {name: _ServerState() for name in self._servers}

    @property
    def vault(self) -> CredentialVault:
        return self._vault

    def applies(self, server: str) -> bool:
        return server in self._servers

    def server_url(self, server: str) -> str:
        return self._servers[server].url or ""

    def http(self) -> httpx2.AsyncClient:
        return http_client(timeout=DISCOVERY_TIMEOUT_S, follow_redirects=False)

    async def authority(self, server: str) -> tuple[Discovered, ClientIdentity]:
        """The server's authorization server and parley's identity there, discovered once an hour."""
        state, cfg = self._state[server], self._servers[server]
        async with state.lock:
            found = state.authority
            if found is None or self._clock() - found.at > DISCOVERY_TTL_S:
                assert cfg.url is not None and cfg.auth is not None
                async with self.http() as http:
                    discovered = await discover(http, cfg.url)
                    if found is not None and found.found.issuer == discovered.issuer:
                        # The same client as before: its refresh tokens are bound to it.
                        identity = found.identity
                    else:
                        kept = Registration(server, self._clients, self._clock(), public=not self.loopback)
                        identity = await register(http, cfg.auth, discovered, self.public_base, kept)
                found = state.authority = _Authority(discovered, identity, self._clock())
            return found.found, found.identity

    def scopes(self, server: str, found: Discovered) -> tuple[str, ...]:
        cfg = self._servers[server].auth
        assert cfg is not None
        return tuple(cfg.scopes) or found.scopes

    async def access_token(self, server: str, principal: str) -> str | None:
        """The principal's usable access token for `server`; None when it has none (never
        authorized, revoked, or expired and not refreshable): the call must not be sent."""
        try:
            credential = await self._vault.of_server(principal, server)
        except CredentialError as exc:
            logger.warning("%s", exc)
            return None
        if credential is None:
            return None
        if self._usable(server, credential):
            return credential.access_token
        if credential.refresh_token is None:
            return None
        # One refresh at a time in this process too: the claim below is per replica, and two
        # calls of one replica holding it would spend one refresh token twice.
        async with self._state[server].refreshing.setdefault(principal, anyio.Lock()):
            return await self._refreshed(server, credential, self._clock())

    def _usable(self, server: str, credential: ClearCredential) -> bool:
        """Not refused by the server, and not due for a refresh."""
        rejected = self._state[server].rejected.get(credential.key.principal) == _digest(
            credential.access_token
        )
        return not rejected and not needs_refresh(credential.expires_at, self._clock())

    async def _refreshed(self, server: str, credential: ClearCredential, now: float) -> str | None:
        claimed = await self._vault.claim_refresh(credential.key, self._claimant)
        if claimed is None:
            # Another replica refreshes it now: its token is good while it has not expired.
            expired = credential.expires_at is not None and credential.expires_at <= now
            return None if expired else credential.access_token
        if self._usable(server, claimed):
            # Refreshed meanwhile (by another call or replica): nothing to spend.
            await self._vault.release_refresh(claimed.key, self._claimant)
            return claimed.access_token
        try:
            found, identity = await self.authority(server)
            assert claimed.refresh_token is not None
            async with self.http() as http:
                token = await refresh(http, found, identity, claimed.refresh_token)
        except OAuthClientError as exc:
            await self._vault.release_refresh(claimed.key, self._claimant)
            logger.warning(
                "refreshing the credential of %r for %s failed: %s", claimed.key.principal, server, exc
            )
            return None
        scopes = tuple(token.scope.split()) if token.scope else None
        done = await self._vault.finish_refresh(
            claimed,
            self._claimant,
            access=token.access_token,
            refresh=token.refresh_token,
            expires_at=token.expires_at(self._clock()),
            scopes=scopes,
        )
        return token.access_token if done else None

    def rejected(self, server: str, principal: str, token: str) -> None:
        """The server answered 401 to `token`: it is not used again (a refresh may replace it)."""
        self._state[server].rejected[principal] = _digest(token)
