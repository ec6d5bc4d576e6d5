"""Alert endpoint URLs: one canonical form and one set of rules, when saved and when delivered.

A URL is taken apart with the standard library and put together again: scheme and host in lower
case, the host as a DNS name in IDNA (each label 1-63 characters, the name at most 253) or as an
IP address in its usual spelling. A host that ends in a number is an IPv4 address as browsers and
``inet_aton`` read it (``0177.0.0.1``, ``127.000.000.001``, ``0x7f.1`` and ``2130706433`` are all
``127.0.0.1``), so the private-address guard judges the address a client would really reach.
Anything that cannot be put together again is refused with a reason, before it is stored, and a
stored URL that no longer passes (saved by an older version) fails its delivery for good instead
of raising in the delivery task.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import SplitResult, urlsplit

import httpx
import idna

from core.wire_types import range_pattern

MAX_URL_LENGTH = 2048
MAX_HOST_LENGTH = 253
MAX_LABEL_LENGTH = 63
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


_LABEL = r"[A-Za-z0-9]{1,20}(?:-[A-Za-z0-9]{1,20}){0,2}"
_LAST_LABEL = r"[A-Za-z][A-Za-z0-9]{0,19}(?:-[A-Za-z0-9]{1,20}){0,2}"  # not a number: a name
URL_PATTERN = (
    rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:{_LABEL}\.){{0,3}}{_LAST_LABEL}"
    rf"(?::{range_pattern(1, 65535)})?(?:[/?#][!-~]*)?$"
)
"""A pattern of URLs that :func:`canonical_url` always accepts, for the OpenAPI document: plain
host names of up to four labels, then any printable path and query. The server accepts more (IP
addresses, international names, credentials), each checked as the module says."""

HTTPS_URL_PATTERN = URL_PATTERN.replace("[Ss]?", "[Ss]", 1)
"""The https URLs of :data:`URL_PATTERN`: what a push endpoint must be where private addresses
are guarded (plain http is accepted only where they are allowed, for development)."""


class BadEndpointUrl(ValueError):
    """Why a URL cannot be an alert endpoint."""


def canonical_url(url: str) -> str:
    """The endpoint URL as stored and delivered to, or :class:`BadEndpointUrl`."""
    if len(url) > MAX_URL_LENGTH:
        raise BadEndpointUrl(f"must be at most {MAX_URL_LENGTH} characters, got {len(url)}")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise BadEndpointUrl("must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in 0-65535
    except ValueError:
        raise BadEndpointUrl(f"is not a valid URL: {url[:100]!r}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise BadEndpointUrl("must be an http or https URL")
    if not parts.hostname:
        raise BadEndpointUrl("must name a host")
    if port == 0:
        raise BadEndpointUrl("must not name port 0")
    rebuilt = _rebuilt(parts, scheme, canonical_host(parts.hostname), port)
    try:
        httpx.URL(rebuilt)  # what delivery parses it with
    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise BadEndpointUrl(f"is not a valid URL: {exc}") from None
    return rebuilt


def canonical_host(host: str) -> str:
    """An IP address in its usual spelling (IPv6 in brackets), or a DNS name in IDNA."""
    if ":" in host:
        try:
            return f"[{ipaddress.IPv6Address(host.split('%', 1)[0]).compressed}]"
        except ValueError:
            raise BadEndpointUrl(f"host {host[:100]!r} is not an IPv6 address") from None
    name = host.lower().removesuffix(".")
    labels = name.split(".")
    if _ends_in_number(labels):
        return str(_ipv4(labels, host))
    return _dns_name(name, labels, host)


def _rebuilt(parts: SplitResult, scheme: str, host: str, port: int | None) -> str:
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}" if userinfo else host
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{netloc}{parts.path or '/'}{query}"


def _ends_in_number(labels: list[str]) -> bool:
    """WHATWG's rule: a host whose last label is a number is an IPv4 address."""
    last = labels[-1]
    if last.isdigit():
        return True
    return last[:2] == "0x" and all(c in "0123456789abcdef" for c in last[2:])


def _ipv4(labels: list[str], host: str) -> ipaddress.IPv4Address:
    """Parse decimal, octal (leading 0) and hex (0x) parts, 1 to 4 of them, as browsers do."""
    numbers = [_ipv4_part(label) for label in labels]
    if len(numbers) > 4 or any(n is None for n in numbers):
        raise BadEndpointUrl(f"host {host[:100]!r} is not a valid IPv4 address")
    *leading, last = [n for n in numbers if n is not None]
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        raise BadEndpointUrl(f"host {host[:100]!r} is not a valid IPv4 address")
    value = last
    for position, number in enumerate(leading):
        value += number << (8 * (3 - position))
    return ipaddress.IPv4Address(value)


def _ipv4_part(label: str) -> int | None:
    if not label:
        return None
    digits, base = label, 10
    if label[:2] == "0x":
        digits, base = label[2:], 16
    elif len(label) > 1 and label[0] == "0":
        digits, base = label[1:], 8
    if not digits:
        return 0
    try:
        return int(digits, base)
    except ValueError:
        return None


def _dns_name(name: str, labels: list[str], host: str) -> str:
    if any(not label for label in labels):
        raise BadEndpointUrl(f"host {host[:100]!r} has an empty label")
    try:
        encoded = idna.encode(name, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise BadEndpointUrl(f"host {host[:100]!r} is not a valid domain name: {exc}") from None
    if len(encoded) > MAX_HOST_LENGTH:
        raise BadEndpointUrl(f"host must be at most {MAX_HOST_LENGTH} characters")
    if any(len(label) > MAX_LABEL_LENGTH for label in encoded.split(".")):
        raise BadEndpointUrl(f"each part of the host is at most {MAX_LABEL_LENGTH} characters")
    return encoded
