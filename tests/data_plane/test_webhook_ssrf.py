"""The webhook guard classifies IPv6 addresses that embed an IPv4 one by the embedded address:
6to4, IPv4-mapped, NAT64 and Teredo forms of loopback, private or metadata addresses are refused
when an alert endpoint is set; their forms of public addresses stay allowed."""

from __future__ import annotations

import pytest

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
    assert alerts.check_url(url, allow_private=False) == url
