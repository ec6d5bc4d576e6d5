"""The webhook guard, when an alert endpoint is saved: IPv6 addresses that embed an IPv4 one are
judged by the embedded address (6to4, IPv4-mapped, NAT64 and Teredo forms of loopback, private or
metadata addresses are refused; their forms of public addresses stay allowed); IPv4 addresses
written as browsers and ``inet_aton`` read them (octal, hex, zero-padded, short, one number) are
judged by the address they reach; hosts the delivery could not use (invalid IDNA, empty or
64-character labels) are refused; what is stored is the canonical URL the delivery uses."""

from __future__ import annotations

from ipaddress import ip_address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.endpoint_urls import URL_PATTERN, canonical_url
from core.errors import ValidationFailed
from data_plane.deadletters import alerts

REFUSED = {
    "6to4 loopback": "2002:7f00:1::",
    "6to4 metadata": "2002:a9fe:a9fe::1",
    "6to4 private": "2002:0a00:0001::",
    "mapped loopback": "::ffff:127.0.0.1",
    "NAT64 metadata": "64:ff9b::a9fe:a9fe",
    "NAT64 private": "64:ff9b::c0a8:0101",
    "Teredo loopback client": "2001:0:4136:e378:8000:63bf:80ff:fffe",
}
ALLOWED = {
    "6to4 public": "2002:0808:0808::1",
    "NAT64 public": "64:ff9b::0808:0808",
    "Teredo public client": "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
}


@pytest.mark.parametrize("address", REFUSED.values(), ids=REFUSED.keys())
def test_embedded_non_public_ipv4_is_refused(address: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        alerts.check_url(f"https://[{address}]/hook", allow_private=False)
    assert refused.value.field == "url"
    assert "address" in refused.value.message


@pytest.mark.parametrize("address", ALLOWED.values(), ids=ALLOWED.keys())
def test_embedded_public_ipv4_is_allowed(address: str) -> None:
    url = f"https://[{address}]/hook"
    assert alerts.check_url(url, allow_private=False) == f"https://[{ip_address(address)}]/hook"


LOOPBACK_SPELLINGS = {
    "octal": "http://0177.0.0.1/hook",
    "zero-padded": "http://127.000.000.001/hook",
    "hex": "http://0x7f.0x0.0x0.0x1/hook",
    "short": "http://127.1/hook",
    "one number": "http://2130706433/hook",
    "metadata, octal": "http://0251.0376.0251.0376/latest",
}


@pytest.mark.parametrize("url", LOOPBACK_SPELLINGS.values(), ids=LOOPBACK_SPELLINGS.keys())
def test_other_spellings_of_private_ipv4_addresses_are_refused(url: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        alerts.check_url(url, allow_private=False)
    assert "address" in refused.value.message
    # With private hosts allowed, the address is stored as the delivery reads it.
    stored = alerts.check_url(url, allow_private=True)
    assert stored.startswith(("http://127.0.0.1/", "http://169.254.169.254/"))


UNUSABLE = {
    "invalid IDNA": "http://xn--a.example.com/hook",
    "empty label": "http://a..b/hook",
    "leading dot": "http://.example.com/hook",
    "64-character label": f"http://{'a' * 64}.example.com/hook",
    "host too long": "http://" + ".".join(["a" * 60] * 5) + "/hook",
    "IPv4 part past 255": "http://1.2.3.256/hook",
    "hyphen at a label's end": "http://hooks-.example.com/hook",
    "port 0": "http://hooks.example.com:0/hook",
}


@pytest.mark.parametrize("url", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_hosts_the_delivery_could_not_use_are_refused_when_saved(url: str) -> None:
    for allow_private in (False, True):
        with pytest.raises(ValidationFailed) as refused:
            alerts.check_url(url, allow_private=allow_private)
        assert refused.value.field == "url"


def test_the_stored_url_is_the_canonical_one_the_delivery_uses() -> None:
    assert (
        alerts.check_url("HTTPS://Hooks.Example.COM:443/a/b?x=1", allow_private=False)
        == "https://hooks.example.com/a/b?x=1"
    )
    assert (
        alerts.check_url("https://bücher.example/hook", allow_private=False)
        == "https://xn--bcher-kva.example/hook"
    )
    assert alerts.check_url("http://hooks.example.com.:8080", allow_private=False) == (
        "http://hooks.example.com:8080/"
    )


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(url=st.from_regex(URL_PATTERN, fullmatch=True))
def test_every_url_the_document_promises_is_accepted(url: str) -> None:
    assert alerts.check_url(url, allow_private=True) == canonical_url(url)
