"""The SSRF guard of outbound webhooks, address by address: every form of a loopback, private,
link-local, CGNAT or unique-local address is refused without allow_private (IPv4-mapped,
NAT64, 6to4 and IPv4-compatible IPv6 forms, and the numeric spellings a resolver accepts),
public ones are pinned with the name kept for Host and TLS."""

from __future__ import annotations

import ipaddress

import pytest

from parley.core.webhooks import retry_delay
from parley.runtime.webhook_guard import ReceiverRefused, pin, why_refused

pytestmark = pytest.mark.anyio

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "::1": "loopback",
    "10.1.2.3": "private",
    "172.16.0.1": "private",
    "192.168.1.1": "private",
    "169.254.169.254": "link-local",
    "fe80::1": "link-local",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.254": "carrier-grade NAT",
    "fc00::1": "unique-local",
    "fd12:3456::1": "unique-local",
    "::ffff:127.0.0.1": "loopback",
    "::ffff:10.0.0.1": "private",
    "::ffff:169.254.169.254": "link-local",
    "64:ff9b::7f00:1": "loopback",
    "2002:7f00:1::": "loopback",
    "::127.0.0.1": "loopback",
    "0.0.0.0": "not a public unicast",
    "224.0.0.1": "not a public unicast",
    "192.0.2.10": "private",
}
ALLOWED = ["93.184.215.14", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "100.128.0.1"]


@pytest.mark.parametrize(("address", "reason"), sorted(REFUSED.items()))
def test_every_form_of_an_internal_address_is_refused(address: str, reason: str) -> None:
    refused = why_refused(ipaddress.ip_address(address))
    assert refused is not None and reason in refused


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    assert why_refused(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://[::ffff:7f00:1]/hook",
        "http://2130706433/hook",  # 127.0.0.1 in one decimal number
        "http://0x7f.1/hook",  # and in hex with a short form
        "https://10.0.0.1/hook",
    ],
)
async def test_a_url_that_resolves_to_an_internal_address_is_refused_unless_allowed(url: str) -> None:
    with pytest.raises(ReceiverRefused, match="allow_private"):
        await pin(url, allow_private=False)
    pinned = await pin(url, allow_private=True)
    assert why_refused(pinned.address) is not None


async def test_a_public_address_is_pinned_and_the_name_kept_for_host_and_tls() -> None:
    pinned = await pin("https://93.184.215.14:8443/a/b?c=1", allow_private=False)
    assert pinned.url == "https://93.184.215.14:8443/a/b?c=1"
    assert (pinned.host_header, pinned.server_name) == ("93.184.215.14:8443", "93.184.215.14")
    v6 = await pin("http://[2606:4700:4700::1111]/", allow_private=False)
    assert (v6.url, v6.server_name) == ("http://[2606:4700:4700::1111]/", None)


async def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(ReceiverRefused, match="does not resolve"):
        await pin("http://no-such-host.invalid/hook", allow_private=True)


async def test_multicast_and_unspecified_addresses_are_refused_even_when_allowed() -> None:
    with pytest.raises(ReceiverRefused, match="not a unicast"):
        await pin("http://0.0.0.0/hook", allow_private=True)


def test_back_off_doubles_up_to_its_cap_and_jitter_spreads_the_upper_half() -> None:
    assert [retry_delay(n, 1.0, 8.0, 1.0) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert retry_delay(3, 1.0, 8.0, 0.0) == 2.0
    assert 2.0 <= retry_delay(3, 1.0, 8.0, 0.37) <= 4.0
