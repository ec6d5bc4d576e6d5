"""A streaming consumer survives its API process being killed (SIGKILL) and restarted.

The member's session timeout (2 s) is shorter than the restart, so the server evicts it and
the consumer must rejoin as well as reconnect.
"""

from __future__ import annotations

import asyncio

import pytest
from queuecore import AsyncMessage, AsyncQueueCore

from tenants.models import NewOrganisation
from tests.support.restartable import Server

pytestmark = pytest.mark.e2e

SESSION_S = 2  # the consumer's session timeout: shorter than the outage


class Ledger:
    """What the handler saw: deliveries, accepted acks, and deliveries after an accepted ack."""

    def __init__(self) -> None:
        self.acked: set[str] = set()
        self.after_ack: list[tuple[str, int]] = []
        self.deliveries = 0

    async def handle(self, message: AsyncMessage) -> None:
        """Ack, remembering the message once the server accepted the ack."""
        self.deliveries += 1
        if message.message_id in self.acked:
            self.after_ack.append((message.message_id, message.attempt))
        # Waits for the verdict; raises when the server is down: the message comes back later.
        await message.ack_with_result()
        self.acked.add(message.message_id)


async def until(check: object, timeout_s: float, what: str) -> None:
    """Wait until ``check()`` is true."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: not true after {timeout_s}s")
        await asyncio.sleep(0.05)


async def scenario(server: Server, key: str) -> tuple[Ledger, list[str], set[str]]:
    """Consume across a kill and restart; return the ledger, the events, and every id sent."""
    ledger, events = Ledger(), []
    async with AsyncQueueCore(key, server.url, timeout=5, max_retries=2) as pq:
        await pq.topics.create("restart", partitions=2, delivery="exactly-once")
        consumer = pq.consume(
            "restart", "g", start_from="earliest", ack_timeout="3s", session_timeout=SESSION_S
        )
        for name in ("connected", "disconnected", "reconnecting", "rebalanced"):
            consumer.on(name, lambda *_, name=name: events.append(name))
        consumer.on_message(ledger.handle)
        consumer.on_error(lambda exc: None)  # failures while the server is down are expected
        await consumer.start()
        sent = {r.message_id for r in (await pq.publish_batch("restart", range(20))).results}
        await until(lambda: sent <= ledger.acked, 30, "the first 20 are acked")
        await asyncio.to_thread(server.kill)
        await until(lambda: "disconnected" in events, 30, "the consumer saw the stream break")
        await asyncio.sleep(SESSION_S + 1)  # down for longer than the member's session
        await asyncio.to_thread(server.start)
        more = await pq.publish_batch("restart", range(20, 40))
        sent |= {r.message_id for r in more.results}
        await until(lambda: sent <= ledger.acked, 60, "the next 20 are acked after the restart")
        await consumer.stop()
    return ledger, events, sent


def test_a_streaming_consumer_reconnects_after_a_kill_and_keeps_acking(
    server: Server, org: NewOrganisation
) -> None:
    ledger, events, sent = asyncio.run(scenario(server, org.keys["production"].secret))
    assert ledger.acked == sent and len(sent) == 40
    assert ledger.after_ack == []  # exactly-once: nothing came back once its ack was accepted
    assert events.count("connected") >= 2, events  # once at start, again after the restart
    assert "reconnecting" in events
    # Whether it rejoined as a new member ("rebalanced") depends on whether anything evicted it
    # during the outage (no beat sweep runs here), so only the reconnection itself is asserted.
    assert events.index("disconnected") < len(events) - 1 - events[::-1].index("connected")
