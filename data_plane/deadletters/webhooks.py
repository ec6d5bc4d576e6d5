"""Outgoing webhooks: the signature, the guard against private addresses, one delivery attempt.

A delivery is a row of the ``webhook_deliveries`` outbox. :func:`deliver` locks it, POSTs its
payload to the environment's alert endpoint and records the outcome; the Celery task around it
(``data_plane.deliver_webhook``) schedules the retries it asks for. Every attempt carries the
same delivery id and body; its timestamp and signature are made afresh (docs/decisions.md §24).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

import httpx

from core.endpoint_urls import BadEndpointUrl, canonical_url
from core.settings import WebhookSettings
from data_plane.deadletters import queries as q
from data_plane.groups.service import Conn
from observability.logging import get_logger

USER_AGENT = "QueueCore-Webhooks/1"
# A Celery countdown past the Redis broker's visibility timeout (1 h) gets the task redelivered
# early, so retries wait at most half of it.
MAX_RETRY_DELAY_S = 1800.0
MAX_ERROR_CHARS = 500
log = get_logger("queuecore.webhooks")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(Exception):
    """The endpoint's host is, or resolves to, an address webhooks must not reach."""


def body_of(payload: dict[str, Any]) -> bytes:
    """The bytes sent and signed: compact JSON, keys sorted, so every attempt sends the same."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """``v1=`` and the hex HMAC-SHA256, keyed by the whole secret, of ``{timestamp}.{body}``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"v1={digest.hexdigest()}"


def headers_for(delivery_id: str, event: str, secret: str, body: bytes) -> dict[str, str]:
    """The headers of one attempt, signed now."""
    timestamp = int(time.time())
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "QueueCore-Delivery": delivery_id,
        "QueueCore-Event": event,
        "QueueCore-Timestamp": str(timestamp),
        "QueueCore-Signature": sign(secret, timestamp, body),
    }


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (IPv4-mapped, 6to4, NAT64, Teredo's client), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    if address.teredo is not None:
        return address.teredo[1]  # the client's address, de-obfuscated
    return None


def refusal(address: Address) -> str | None:
    """Why webhooks must not reach ``address`` (loopback, private, …), or None for a public one.
    An IPv6 address that embeds an IPv4 one is judged by the IPv4 address it reaches."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = embedded_ipv4(address)
        if embedded is not None:
            reason = refusal(embedded)
            return None if reason is None else f"{address} embeds {reason}"
    for kind in ("loopback", "private", "link_local", "multicast", "reserved", "unspecified"):
        if getattr(address, f"is_{kind}"):
            return f"{address} is a {kind.replace('_', '-')} address"
    return None if address.is_global else f"{address} is not a public address"


def literal_refusal(host: str) -> str | None:
    """:func:`refusal` for a host written as an IP address or ``localhost`` (no DNS lookup)."""
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return f"{host} is a loopback address"
    try:
        return refusal(ipaddress.ip_address(host))
    except ValueError:
        return None


async def public_address(host: str, port: int) -> str:
    """One address of ``host``, after checking that every address it resolves to is public."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses:
        reason = refusal(address)
        if reason is not None:
            raise AddressRefused(f"refused: {host} resolves to {reason}")
    return str(addresses[0])


async def pinned_request(url: str, allow_private: bool) -> tuple[httpx.URL, dict[str, Any]]:
    """The URL to connect to and its request extensions.

    With the guard on, the connection goes to the address that was checked (the host name stays
    in the Host header and TLS server name), so a second DNS answer cannot swap in a private one.
    """
    target = httpx.URL(canonical_url(url))  # stored by an older version: perhaps not canonical
    if allow_private:
        return target, {}
    port = target.port or (443 if target.scheme == "https" else 80)
    address = await public_address(target.host, port)
    return target.copy_with(host=address), {"sni_hostname": target.host}


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one POST gave: the response status, or why there was none; whether to try again."""

    status_code: int | None
    error: str | None
    retryable: bool

    @property
    def delivered(self) -> bool:
        """A 2xx answer."""
        return self.status_code is not None and 200 <= self.status_code < 300


async def post(url: str, headers: dict[str, str], body: bytes, cfg: WebhookSettings) -> Attempt:
    """POST once, redirects not followed, the response body never read."""
    try:
        target, extensions = await pinned_request(url, cfg.allow_private)
    except AddressRefused as exc:
        return Attempt(None, str(exc), retryable=False)
    except BadEndpointUrl as exc:  # saved before the rules were the delivery's own
        return Attempt(None, _short(f"refused: the URL {exc}"), retryable=False)
    except OSError as exc:  # the name did not resolve: perhaps a DNS outage
        return Attempt(None, _short(f"DNS lookup failed: {exc}"), retryable=True)
    host_header = {"Host": httpx.URL(canonical_url(url)).netloc.decode("ascii")}  # checked above
    try:
        async with (
            httpx.AsyncClient(timeout=cfg.timeout_ms / 1000, trust_env=False) as client,
            client.stream(
                "POST", target, content=body, headers=headers | host_header, extensions=extensions
            ) as response,
        ):
            code = response.status_code
    except httpx.HTTPError as exc:
        return Attempt(None, _short(f"{type(exc).__name__}: {exc}"), retryable=True)
    return Attempt(code, None if 200 <= code < 300 else f"HTTP {code}", retryable=True)


def _short(error: str) -> str:
    return error[:MAX_ERROR_CHARS]


@dataclass(frozen=True, slots=True)
class Outcome:
    """Where a delivery stands after :func:`deliver`; ``retry_in_s`` when it must be tried again."""

    delivery_id: str
    status: str  # pending, delivered, failed; or skipped (unknown, or being sent elsewhere)
    attempts: int = 0
    retry_in_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly (a Celery task result)."""
        return {"deliveryId": self.delivery_id, "status": self.status, "attempts": self.attempts}


def retry_delay_s(attempts: int, cfg: WebhookSettings) -> float:
    """Exponential backoff: the base, doubled after each failed attempt, capped."""
    return min(cfg.retry_base_ms / 1000 * 2 ** (attempts - 1), MAX_RETRY_DELAY_S)


async def deliver(conn: Conn, delivery_id: str, cfg: WebhookSettings) -> Outcome:
    """Try to deliver a pending outbox row once and record how it went. Needs autocommit."""
    async with conn.transaction():
        row = await (await conn.execute(q.LOCK_DELIVERY, {"id": delivery_id})).fetchone()
        if row is None or row["status"] != "pending":
            status = "skipped" if row is None else row["status"]
            return Outcome(delivery_id, status, row["attempts"] if row else 0)
        if row["url"] is None:
            attempt = Attempt(None, "no alert endpoint is configured", retryable=False)
        else:
            attempt = await _attempt(row, cfg)
        return await _record(conn, row, attempt, cfg)


async def _attempt(row: dict[str, Any], cfg: WebhookSettings) -> Attempt:
    """One POST of the row's payload. Whatever goes wrong is a failed attempt, counted against
    ``max_attempts``: an error that escaped would leave the row pending, uncounted, for the stale
    sweep to queue again for ever."""
    try:
        body = body_of(row["payload"])
        headers = headers_for(row["id"], row["event"], row["secret"], body)
        return await post(row["url"], headers, body, cfg)
    except Exception as exc:
        log.error("webhook_attempt_crashed", delivery_id=row["id"], exc_info=exc)
        return Attempt(None, _short(f"{type(exc).__name__}: {exc}"), retryable=True)


async def _record(
    conn: Conn, row: dict[str, Any], attempt: Attempt, cfg: WebhookSettings
) -> Outcome:
    """Store the attempt's outcome: delivered, failed for good, or pending a retry."""
    attempts = row["attempts"] + 1
    retry_in_s = None
    if attempt.delivered:
        status = "delivered"
    elif attempt.retryable and attempts < cfg.max_attempts:
        status, retry_in_s = "pending", retry_delay_s(attempts, cfg)
    else:
        status = "failed"
    await conn.execute(
        q.RECORD_ATTEMPT,
        {
            "id": row["id"],
            "status": status,
            "status_code": attempt.status_code,
            "error": attempt.error,
            "retry_in_s": retry_in_s or 0.0,
        },
    )
    _log(row, attempt, status, attempts)
    return Outcome(row["id"], status, attempts, retry_in_s)


def _log(row: dict[str, Any], attempt: Attempt, status: str, attempts: int) -> None:
    """One line per attempt: the delivery, never the URL (it may hold a token) or the secret."""
    fields = {
        "delivery_id": row["id"],
        "environment_id": row["environment_id"],
        "webhook_event": row["event"],
        "attempt": attempts,
        "status_code": attempt.status_code,
    }
    if status == "delivered":
        log.info("webhook_delivered", **fields)
    else:
        log.warning("webhook_attempt_failed", status=status, error=attempt.error, **fields)
