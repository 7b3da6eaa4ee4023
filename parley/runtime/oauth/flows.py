"""Pending authorizations at downstream servers, completed only by the session's owner
(docs/credentials.md#user-oauth).

A call to a user_oauth server whose session's owner has no usable token parks with an
`authorization_required` interrupt and a flow (`open`). Its payload carries a parley connect link,
never the authorization server's URL. The owner's signed-in browser opens the link (`connect`):
only then, and only for the owner, a state, a PKCE verifier and a browser binding are made, and
the authorization URL is handed to that browser with the binding in a cookie. The authorization
server's redirect back (`callback`) must bring a live flow's state, the same browser's binding and
the discovered issuer; the flow is used once, the code exchanged, the credential stored under
(principal, server, issuer), and the interrupt resolved, so the parked call runs once.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from parley.config import ServerConfig
from parley.config.loading import credential_keys
from parley.core.credentials import CredentialKey
from parley.core.ids import SessionId, new_flow_id, new_interrupt_id
from parley.core.oauth_flows import FLOW_S, OAuthFlow, same_digest
from parley.core.records import AUTHORIZED, InterruptRecord, Resolution, SessionRecord, ToolCallRecord
from parley.errors import CredentialError, OAuthClientError, ParleyError
from parley.redaction import shown_host
from parley.runtime.access import Principal
from parley.runtime.audit import AUTHORIZE, CONNECT, Audit
from parley.runtime.credentials import CredentialVault, Keyring
from parley.runtime.oauth.bearer import DownstreamAuth
from parley.runtime.oauth.client import ClientIdentity, authorization_url, exchange_code, pkce_pair
from parley.runtime.oauth.discovery import Discovered
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.storage.ports import Store

logger = logging.getLogger(__name__)

# Where the session's page is once the flow is done (the page's own routes).
SESSION_PAGE = "/ui/#/s/{session}"
CONNECT_PAGE = "/ui/#/connect/{flow}"
# The loopback listener's connect path (LoopbackLinks).
LOOPBACK_CONNECT = "/connect"


class FlowRefused(ParleyError):
    """A connect or callback request that changes nothing: `status` is the HTTP answer."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__(detail)


@dataclass(frozen=True, slots=True)
class Connect:
    """What the owner's browser gets from the connect step: where to go, and the binding value
    to keep in an HttpOnly cookie until the callback."""

    authorize_url: str
    binding: str
    # The cookie's name: one per flow, so two flows started in one browser do not undo each other.
    cookie: str

    def __repr__(self) -> str:
        return "Connect(...)"


def digest(value: str) -> str:
    return hashlib.sha256(b"parley oauth flow\0" + value.encode()).hexdigest()


def cookie_name(state: str) -> str:
    """The name of the browser-binding cookie of the flow with this state."""
    return "parley_oauth_" + hashlib.sha256(b"parley oauth cookie\0" + state.encode()).hexdigest()[:16]


class LoopbackLinks:
    """Connect links for a parley with no public URL (served over stdio, say): a listener on
    127.0.0.1 of this process (server/oauth_loopback.py) serves them and the callback, as command
    line OAuth clients do. Nobody signs in there, so each link carries a code only this process
    can make for that flow: whoever holds the link was given it by parley for the session's
    owner, whose client showed it."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)
        self.base = ""  # http://127.0.0.1:PORT once the listener is bound

    def code(self, flow_id: str) -> str:
        return hmac.new(self._secret, flow_id.encode(), hashlib.sha256).hexdigest()

    def connect_url(self, flow_id: str) -> str:
        return f"{self.base}{LOOPBACK_CONNECT}/{flow_id}?code={self.code(flow_id)}"

    def holds(self, flow_id: str, code: str) -> bool:
        return hmac.compare_digest(self.code(flow_id).encode(), code.encode())


def _verifier_key(flow: OAuthFlow) -> CredentialKey:
    # The associated data of a flow's verifier names the flow: it opens for this flow only.
    return CredentialKey(principal=flow.principal, server=flow.server, issuer=f"flow {flow.id}")


class OAuthFlows:
    def __init__(
        self,
        store: Store,
        keyring: Keyring,
        auth: DownstreamAuth,
        signals: SessionSignals,
        clock: Callable[[], float] = time.time,
        loopback: LoopbackLinks | None = None,
    ) -> None:
        # Links served by this process on 127.0.0.1 (None: by parley's public URL).
        self.loopback = loopback
        self._store = store
        self._keyring = keyring
        self._auth = auth
        self._signals = signals
        self._steps = SessionSteps(store)
        self._clock = clock
        self._audit = Audit(store, clock)

    @property
    def auth(self) -> DownstreamAuth:
        return self._auth

    @property
    def public_base(self) -> str:
        return self._auth.public_base

    def applies(self, server: str | None) -> bool:
        return server is not None and self._auth.applies(server)

    async def open(
        self,
        session: SessionRecord,
        call: ToolCallRecord,
        server: str,
        principal: str,
        scopes: tuple[str, ...],
    ) -> InterruptRecord:
        """A new flow for the parked call at `server`, and the interrupt (not raised yet) it will resolve."""
        now = self._clock()
        flow = OAuthFlow(
            id=new_flow_id(),
            principal=principal,
            server=server,
            session_id=session.id,
            interrupt_id=new_interrupt_id(),
            created_at=now,
            expires_at=now + FLOW_S,
            scopes=scopes,
        )
        await self._store.put_flow(flow)
        host = shown_host(self._auth.server_url(server))
        payload: dict[str, Any] = {
            "server": server,
            "host": host,
            "tool": call.name,
            "flow_id": flow.id,
            "connect_url": self._connect_url(flow.id),
            "question": f"Connect your account at {server} ({host}) so the agent can call "
            f"{call.name} as you.",
        }
        if scopes:
            payload["scopes"] = list(scopes)
        return InterruptRecord(
            id=flow.interrupt_id,
            session_id=session.id,
            turn_id=call.turn_id,
            tool_call_id=call.id,
            kind="authorization_required",
            status="pending",
            payload=payload,
            created_at=now,
            deadline=flow.expires_at,
        )

    def _connect_url(self, flow_id: str) -> str:
        if self.loopback is not None:
            return self.loopback.connect_url(flow_id)
        return self._auth.public_base + CONNECT_PAGE.format(flow=flow_id)

    def bind_loopback(self, port: int) -> None:
        """The loopback listener is bound: links, redirect URI and client name its address."""
        assert self.loopback is not None
        self.loopback.base = self._auth.public_base = f"http://127.0.0.1:{port}"
        self._auth.loopback = True

    async def connect_by_code(self, flow_id: str, code: str) -> Connect:
        """A loopback connect link opened: its code stands for the owner's sign-in.

        Raises:
            FlowRefused: a wrong code (403, nothing changes), or as `connect`.
        """
        flow = await self._store.get_flow(flow_id)
        if self.loopback is None or flow is None or not self.loopback.holds(flow_id, code):
            raise FlowRefused(403, "this connect link is not one parley made; ask the agent again")
        return await self.connect(flow_id, Principal(id=flow.principal, client="browser", authenticated=True))

    async def _authority(self, flow: OAuthFlow) -> tuple[Discovered, ClientIdentity]:
        """The flow's server's authorization server, as discovered; FlowRefused (502) when it
        cannot be read now."""
        try:
            return await self._auth.authority(flow.server)
        except OAuthClientError as exc:
            raise FlowRefused(
                502, f"the authorization server of {flow.server} cannot be used now: {exc}"
            ) from None

    async def _pending_interrupt(self, flow: OAuthFlow) -> InterruptRecord | None:
        pending = await self._store.list_interrupts(SessionId(flow.session_id), pending_only=True)
        return next((i for i in pending if i.id == flow.interrupt_id), None)

    async def connect(self, flow_id: str, who: Principal) -> Connect:
        """The owner opens the connect link. Anyone else is refused (403, audited) and nothing
        changes.

        Raises:
            FlowRefused: unknown (404), not the owner's (403), used or expired (410).
        """
        flow = await self._store.get_flow(flow_id)
        if flow is None:
            raise FlowRefused(404, "no such connect link")
        if not hmac.compare_digest(flow.principal.encode(), who.id.encode()):
            await self._audit.refused(who, CONNECT, flow.session_id, flow.server, "not the session's owner")
            raise FlowRefused(
                403, "this connect link belongs to the session's owner; sign in as them to open it"
            )
        now = self._clock()
        if now >= flow.expires_at or await self._pending_interrupt(flow) is None:
            raise FlowRefused(410, "this connect link was used or has expired; ask the agent again")
        if flow.used_at is not None:
            # Used, yet its call still waits: the callback's process stopped half way (after the
            # flow's single use, before the account was stored). The link starts a new flow.
            flow = replace(flow, id=new_flow_id(), created_at=now, used_at=None)
            await self._store.put_flow(flow)
        found, identity = await self._authority(flow)
        scopes = tuple(dict.fromkeys((*self._auth.scopes(flow.server, found), *flow.scopes)))
        state, binding = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        verifier, challenge = pkce_pair()
        started = replace(
            flow,
            state_digest=digest(state),
            binding_digest=digest(binding),
            issuer=found.issuer,
            key_id=self._keyring.current_id,
            verifier=self._keyring.seal(_verifier_key(flow), "pkce_verifier", verifier),
            scopes=scopes,
        )
        if not await self._store.start_flow(started, now):
            raise FlowRefused(410, "this connect link was used or has expired; ask the agent again")
        url = authorization_url(found, identity, self._auth.public_base, scopes, state, challenge)
        await self._audit.record(
            who, CONNECT, session_id=flow.session_id, target=flow.server, issuer=found.issuer
        )
        return Connect(url, binding, cookie_name(state))

    async def callback(
        self,
        state: str | None,
        code: str | None,
        iss: str | None,
        error: str | None,
        cookies: Mapping[str, str],
    ) -> str:
        """The authorization server's redirect back; returns where the browser goes next.

        Raises:
            FlowRefused: 400 for a forged, replayed or expired state, another browser, or the
                wrong issuer; nothing is stored and nothing changes then.
        """
        if not state:
            raise FlowRefused(400, "the callback has no state")
        flow = await self._store.flow_by_state(digest(state))
        now = self._clock()
        if flow is None or not same_digest(flow.state_digest, digest(state)) or not flow.live(now):
            raise FlowRefused(400, "this authorization is unknown, used or expired")
        binding = cookies.get(cookie_name(state))
        if binding is None or not same_digest(flow.binding_digest, digest(binding)):
            raise FlowRefused(400, "this authorization was started in another browser")
        found, identity = await self._authority(flow)
        if iss is None and found.server.authorization_response_iss_parameter_supported:
            raise FlowRefused(400, "the authorization response has no iss (RFC 9207)")
        if iss is not None and not hmac.compare_digest(iss.encode(), (flow.issuer or "").encode()):
            raise FlowRefused(400, "the authorization response comes from another issuer")
        if not await self._store.use_flow(flow.id, digest(state), now):
            raise FlowRefused(400, "this authorization is unknown, used or expired")
        page = self._auth.public_base + SESSION_PAGE.format(session=flow.session_id)
        if error is not None or not code:
            # The error code only, as a word: the text is the browser's to choose, not the model's to read.
            code_word = re.sub(r"[^a-z_]", "", str(error or "no code").lower())[:40]
            reason = (
                "the person declined at the authorization server"
                if error == "access_denied"
                else f"the authorization server answered {code_word}"
            )
            await self._resolve(flow, Resolution(declined=True, reason=reason))
            return page
        try:
            assert flow.verifier is not None and flow.key_id is not None and flow.issuer is not None
            verifier = self._keyring.open(_verifier_key(flow), "pkce_verifier", flow.key_id, flow.verifier)
            async with self._auth.http() as http:
                token = await exchange_code(http, found, identity, self._auth.public_base, code, verifier)
        except (OAuthClientError, CredentialError) as exc:
            logger.warning("connecting %r to %s failed: %s", flow.principal, flow.server, exc)
            await self._resolve(flow, Resolution(declined=True, reason=f"the authorization failed: {exc}"))
            return page
        granted = tuple(token.scope.split()) if token.scope else flow.scopes
        await self._auth.vault.save(
            CredentialKey(principal=flow.principal, server=flow.server, issuer=flow.issuer),
            access=token.access_token,
            refresh=token.refresh_token,
            expires_at=token.expires_at(self._clock()),
            scopes=granted,
        )
        await self._resolve(flow, Resolution(answer=AUTHORIZED))
        await self._resume_others(flow, granted)
        return page

    async def _resume_others(self, done: OAuthFlow, granted: tuple[str, ...]) -> None:
        """The owner's other calls parked for this server (other sessions, other links) go on
        too with the account now connected, unless they wait for a scope it was not granted. A
        flow already under way in a browser is left to finish (its callback would be refused)."""
        for other in await self._store.live_flows(done.principal, done.server, self._clock()):
            if other.state_digest is not None or not set(other.scopes) <= set(granted):
                continue
            if await self._store.close_flow(other.id, self._clock()):
                await self._resolve(other, Resolution(answer=AUTHORIZED))

    async def _resolve(self, flow: OAuthFlow, resolution: Resolution) -> None:
        result = "connected" if resolution.answer == AUTHORIZED else "not connected"
        owner = Principal(id=flow.principal, client="browser", authenticated=True)
        await self._audit.record(
            owner,
            AUTHORIZE,
            session_id=flow.session_id,
            target=flow.server,
            issuer=flow.issuer,
            result=result,
        )
        session_id = SessionId(flow.session_id)
        await self._steps.resolve_interrupt(
            session_id, flow.interrupt_id, resolution, flow.principal, self._clock()
        )
        self._signals.notify(session_id)


def build_oauth(
    config: ServerConfig, store: Store, signals: SessionSignals, claimant: str, clock: Callable[[], float]
) -> OAuthFlows | None:
    """The flows and tokens of the servers with auth user_oauth (None: there are none).

    Raises:
        ConfigErrors: the credentials key is missing or unreadable.
    """
    if not any(cfg.auth is not None for cfg in config.mcp_servers.values()):
        return None
    keyring = Keyring.of(credential_keys(config))
    public_base = config.http.public_base
    # Without a public URL, the links and the callback are served on 127.0.0.1 (its port once bound).
    loopback = LoopbackLinks() if public_base is None else None
    vault = CredentialVault(store, keyring, clock)
    auth = DownstreamAuth(config.mcp_servers, vault, public_base or "", claimant, clock, clients=store)
    return OAuthFlows(store, keyring, auth, signals, clock, loopback)
