"""How an inbound trigger's request is authenticated: a bearer token with the trigger's scope,
or an HMAC signature over the exact body, in the Standard Webhooks form (with a timestamp that
must be within the trigger's tolerance) or GitHub's X-Hub-Signature-256. Each check returns the
delivery id that makes a repeated delivery start nothing new (docs/webhooks.md#triggers)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from parley.config import TriggerConfig
from parley.core.scopes import ADMIN
from parley.runtime.webhooks import signer

# The longest delivery id taken (GitHub's are UUIDs; Standard Webhooks' msg_... ids are short).
MAX_DELIVERY_ID = 200


class TriggerRefused(Exception):
    """The request is not authenticated for the trigger: the status and what to fix."""

    def __init__(self, status: int, kind: str, detail: str) -> None:
        self.status, self.kind, self.detail = status, kind, detail
        super().__init__(detail)


def _delivery_id(value: str | None, header: str) -> str:
    if not value:
        raise TriggerRefused(
            401, "missing-signature", f"the {header} header is missing; a signed trigger needs it"
        )
    if len(value) > MAX_DELIVERY_ID or not value.isprintable():
        raise TriggerRefused(
            400,
            "bad-delivery-id",
            f"the {header} header must be at most {MAX_DELIVERY_ID} printable characters",
        )
    return value


@dataclass(frozen=True, slots=True)
class SignedRequest:
    headers: Mapping[str, str]
    body: bytes
    now: float


def check_standard_webhooks(trigger: TriggerConfig, secret: str, request: SignedRequest) -> str:
    """The webhook-id of a request signed as Standard Webhooks says, within the tolerance."""
    headers = request.headers
    delivery = _delivery_id(headers.get("webhook-id"), "webhook-id")
    stamp, signatures = headers.get("webhook-timestamp"), headers.get("webhook-signature")
    if not stamp or not signatures:
        raise TriggerRefused(401, "missing-signature", "webhook-timestamp and webhook-signature are required")
    if not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
        raise TriggerRefused(401, "bad-signature", "webhook-timestamp must be whole seconds since 1970")
    if abs(request.now - int(stamp)) > trigger.tolerance_s:
        raise TriggerRefused(
            401,
            "stale-signature",
            f"webhook-timestamp is more than {trigger.tolerance_s:g}s from now; sign it afresh",
        )
    try:
        data = request.body.decode()
    except UnicodeDecodeError:
        raise TriggerRefused(400, "bad-json", "the body is not UTF-8 JSON") from None
    expected = signer(secret).sign(delivery, datetime.fromtimestamp(int(stamp), UTC), data).split(",", 1)[1]
    wanted = base64.b64decode(expected)
    for versioned in signatures.split(" "):
        version, _, signature = versioned.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(signature, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(wanted, given):
            return delivery
    raise TriggerRefused(
        401, "bad-signature", "no webhook-signature matches the body; check the shared secret"
    )


def check_github(secret: str, request: SignedRequest) -> str:
    """The X-GitHub-Delivery of a request whose X-Hub-Signature-256 matches its body."""
    delivery = _delivery_id(request.headers.get("x-github-delivery"), "X-GitHub-Delivery")
    signature = request.headers.get("x-hub-signature-256")
    if not signature:
        raise TriggerRefused(401, "missing-signature", "the X-Hub-Signature-256 header is missing")
    expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.strip().lower().encode()):
        raise TriggerRefused(
            401, "bad-signature", "X-Hub-Signature-256 does not match the body; check the secret"
        )
    return delivery


def check_bearer(trigger: TriggerConfig, scopes: frozenset[str] | None) -> None:
    """A token checked by the bearer gate must carry the trigger's scope (None: auth: none)."""
    if scopes is not None and trigger.scope not in scopes and ADMIN not in scopes:
        raise TriggerRefused(
            403,
            "insufficient-scope",
            f"the access token lacks the scope {trigger.scope} this trigger requires",
        )
