"""The SSRF guard of outbound webhooks: a receiver's name resolved once, every address it has
checked, and the one address the request then connects to (so a second lookup cannot swap in an
internal one). Loopback, private, link-local, CGNAT, unique-local and other non-global
addresses are refused, also inside IPv4-mapped and NAT64 IPv6 forms, unless the subscription
allows private receivers."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import anyio

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class ReceiverRefused(Exception):
    """The receiver's address is not one parley sends to; the message says why and the fix."""


@dataclass(frozen=True, slots=True)
class PinnedTarget:
    """Where one request goes: the URL with the address in place of the name, the Host header
    and TLS server name it still carries, and the address itself."""

    url: str
    host_header: str
    server_name: str | None
    address: IpAddress


def embedded_ipv4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (IPv4-mapped, IPv4-compatible, NAT64, 6to4)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    packed = int(address)
    if packed >> 32 == 0 and packed > 1:  # ::a.b.c.d, the deprecated IPv4-compatible form
        return ipaddress.IPv4Address(packed)
    return None


def why_refused(address: IpAddress) -> str | None:
    """Why parley does not send to `address` without allow_private (None: it may)."""
    inner = embedded_ipv4(address)
    if inner is not None:
        reason = why_refused(inner)
        return f"{reason} (as {address})" if reason else None
    if address.is_multicast or address.is_unspecified:
        return f"{address} is not a public unicast address"
    if address.is_loopback:
        return f"{address} is a loopback address"
    if address.is_link_local:
        return f"{address} is a link-local address"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return f"{address} is a carrier-grade NAT address (100.64.0.0/10)"
    if address.is_private:
        kind = "unique-local" if isinstance(address, ipaddress.IPv6Address) else "private"
        return f"{address} is a {kind} address"
    if address.is_reserved or not address.is_global:
        return f"{address} is not a public unicast address"
    return None


def why_never(address: IpAddress) -> str | None:
    """Addresses no receiver has, allowed or not."""
    if address.is_multicast or address.is_unspecified:
        return f"{address} is not a unicast address"
    return None


async def pin(url: str, *, allow_private: bool) -> PinnedTarget:
    """Resolve `url`'s host and pin one address for the request.

    Raises:
        ReceiverRefused: the name does not resolve, or an address it resolves to is refused.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ReceiverRefused(f"the receiver's host {host} does not resolve ({exc})") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not addresses:
        raise ReceiverRefused(f"the receiver's host {host} has no address")
    for address in addresses:
        # Every address is checked: a name that resolves to a public and a private one is refused.
        reason = why_never(address) or (None if allow_private else why_refused(address))
        if reason is not None:
            fix = "" if allow_private else "; set allow_private: true on the subscription if it is meant"
            raise ReceiverRefused(f"the receiver {host} is refused: {reason}{fix}")
    chosen = addresses[0]
    literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    host_header = parts.netloc.rsplit("@", 1)[-1]
    server_name = host if parts.scheme == "https" else None
    pinned_url = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    return PinnedTarget(pinned_url, host_header, server_name, chosen)
