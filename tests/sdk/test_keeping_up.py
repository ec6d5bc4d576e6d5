"""The Python SDK keeps up on the Developer tier (100 publish, 50 consume requests a second):
publishes share batch requests, acks go in batches, a consumer holds no more than it can work
through and keeps the leases of what it holds.

Counts are small here (CI); ``python -m benchmarks.sdks`` runs the full-size forms.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from queuecore import (
    AckRejected,
    AsyncMessage,
    AsyncQueueCore,
    FlowControl,
    LeaseExpired,
    PayloadTooLarge,
    QueueCore,
)

from tenants.models import NewOrganisation
from tests.sdk.conftest import eventually
from tests.sdk.test_async import never
from tests.support.http_faults import faulty_proxy
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

pytestmark = pytest.mark.e2e


@pytest.fixture
def dev(services: Services) -> NewOrganisation:
    """A fresh Developer organisation: 100 publish and 50 consume requests a second per key."""
    return new_organisation(services.database_url, tier="developer")


def requests_to(received: list[tuple[str, str]], suffix: str) -> int:
    """How many requests the proxy saw whose path (without its query) ends with ``suffix``."""
    return sum(1 for _, path in received if path.partition("?")[0].endswith(suffix))


def test_concurrent_publishes_share_batch_requests_and_keep_each_keys_order(
    api: str, dev: NewOrganisation
) -> None:
    async def scenario(url: str) -> list[Any]:
        async with AsyncQueueCore(dev.keys["production"].secret, url) as pq:
            await pq.topics.create("coalesced", partitions=3)
            calls = [pq.publish("coalesced", {"n": n}, key=f"k{n % 5}") for n in range(300)]
            return list(await asyncio.gather(*calls))

    with faulty_proxy(api, never) as proxy:
        results = asyncio.run(scenario(proxy.url))
    assert requests_to(proxy.received, "/messages/batch") <= 3, proxy.received
    assert requests_to(proxy.received, "/messages") == 0  # no message went alone
    assert len({(r.partition, r.offset) for r in results}) == 300
    for key in range(5):
        mine = [r for n, r in enumerate(results) if n % 5 == key]
        assert len({r.partition for r in mine}) == 1
        assert [r.offset for r in mine] == sorted(r.offset for r in mine), "call order kept"
    assert all(r.idempotency_key and r.timestamp for r in results)


def test_a_message_the_server_refuses_fails_only_its_own_publish(
    api: str, dev: NewOrganisation
) -> None:
    async def scenario() -> list[Any]:
        async with AsyncQueueCore(dev.keys["production"].secret, api) as pq:
            await pq.topics.create("mixed", partitions=1)
            calls = [pq.publish("mixed", "x" * (300_000 if n == 7 else 10)) for n in range(16)]
            return list(await asyncio.gather(*calls, return_exceptions=True))

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes[7], PayloadTooLarge)  # over the Developer tier's 256 KiB
    stored = [o for n, o in enumerate(outcomes) if n != 7]
    assert [o.offset for o in stored] == list(range(15))


def test_synchronous_publishes_from_threads_share_requests(api: str, dev: NewOrganisation) -> None:
    with faulty_proxy(api, never) as proxy:
        with QueueCore(dev.keys["production"].secret, proxy.url) as pq:
            pq.topics.create("threads", partitions=2)
            with ThreadPoolExecutor(8) as pool:
                results = list(pool.map(lambda n: pq.publish("threads", n), range(160)))
            futures = [pq.publish_nowait("threads", n) for n in range(160, 200)]
            later = [f.result(10) for f in futures]
        publishes = requests_to(proxy.received, "/messages") + requests_to(
            proxy.received, "/messages/batch"
        )
    assert len({(r.partition, r.offset) for r in results + later}) == 200
    assert publishes <= 60, publishes  # 200 calls from 8 threads and one loop of futures
    assert requests_to(proxy.received, "/messages/batch") >= 1


def test_an_iterator_acking_one_by_one_has_no_refused_acks_and_no_lag(
    api: str, dev: NewOrganisation
) -> None:
    errors: list[Exception] = []
    seen: list[int] = []
    with (
        faulty_proxy(api, never) as proxy,
        QueueCore(dev.keys["production"].secret, proxy.url) as pq,
    ):
        pq.topics.create("iterated", partitions=2)
        for first in range(0, 300, 100):
            pq.publish_batch("iterated", list(range(first, first + 100)))
        with pq.consume("iterated", "g", start_from="earliest") as consumer:
            consumer.on_error(errors.append)
            for message in consumer:
                seen.append(message.data)
                message.ack()  # no round trip of its own
                if len(seen) == 300:
                    break
        lag = sum(o.lag for o in pq.offsets.get("iterated", "g"))
    assert errors == []
    assert sorted(seen) == list(range(300)) and lag == 0
    assert requests_to(proxy.received, "/ack") <= 100, requests_to(proxy.received, "/ack")


def test_a_slow_sequential_handler_keeps_its_leases_and_dead_letters_nothing(
    api: str, dev: NewOrganisation
) -> None:
    async def scenario(url: str) -> tuple[collections.Counter[int], int, list[Exception]]:
        errors: list[Exception] = []
        async with AsyncQueueCore(dev.keys["production"].secret, url) as pq:
            await pq.topics.create("slow", partitions=1)
            await pq.publish_batch("slow", list(range(24)))
            seen: collections.Counter[int] = collections.Counter()
            consumer = pq.consume(
                "slow", "g", start_from="earliest", ack_timeout="2s", dead_letter={"max_retries": 0}
            )

            @consumer.on_message
            async def handle(message: AsyncMessage) -> None:
                seen[message.data] += 1
                await asyncio.sleep(0.3)  # ten held take 3 s: past the 2 s ack timeout
                await message.ack()

            consumer.on_error(errors.append)
            await consumer.start()
            for _ in range(600):
                if len(seen) == 24:
                    break
                await asyncio.sleep(0.05)
            await consumer.stop()
            depth = (await pq.dlq.inspect("slow", "g")).depth
            return seen, depth, errors

    with faulty_proxy(api, never) as proxy:
        seen, depth, errors = asyncio.run(scenario(proxy.url))
    assert sorted(seen) == list(range(24)) and set(seen.values()) == {1}, seen  # no duplicates
    assert depth == 0 and errors == []
    assert requests_to(proxy.received, "/extend") >= 1  # the leases were kept


def test_an_expired_lease_is_never_handed_out_and_its_ack_is_not_sent(
    api: str, dev: NewOrganisation, caplog: pytest.LogCaptureFixture
) -> None:
    """Exactly-once: a message held past its last extension is dropped, not acked late."""

    async def scenario(url: str) -> tuple[list[tuple[int, int]], list[Exception], Any]:
        errors: list[Exception] = []
        async with AsyncQueueCore(dev.keys["production"].secret, url) as pq:
            await pq.topics.create("expiring", partitions=1)
            await pq.publish_batch("expiring", [0, 1])
            flow = FlowControl(max_messages=2, max_lease_extension=1)
            consumer = pq.consume(
                "expiring", "g", start_from="earliest", ack_timeout="1s", flow_control=flow
            )
            consumer.on_error(errors.append)
            seen: list[tuple[int, int]] = []
            refused = None
            async with consumer:
                async for message in consumer:
                    seen.append((message.data, message.attempt))
                    if seen == [(0, 1)]:
                        await asyncio.sleep(2.5)  # past the lease and its last extension
                        try:
                            await message.ack_with_result()
                        except AckRejected as exc:
                            refused = exc
                        continue
                    await message.ack()
                    if len(seen) == 3:
                        break
            return seen, errors, refused

    caplog.set_level(logging.WARNING, logger="queuecore")
    with faulty_proxy(api, never) as proxy:
        seen, errors, refused = asyncio.run(scenario(proxy.url))
    # Message 1 expired in the buffer: dropped, not handed out; both came back as attempt 2.
    assert seen == [(0, 1), (0, 2), (1, 2)], seen
    assert refused is not None and "lease had ended" in refused.message
    assert any(isinstance(e, LeaseExpired) for e in errors)
    acks = [path for _, path in proxy.received if path.endswith("/ack")]
    assert len(acks) >= 1  # the later acks were sent; the stale one was refused locally


def test_refused_acks_are_one_log_line_per_request_without_a_traceback(
    api: str, dev: NewOrganisation, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="queuecore")
    secret = dev.keys["production"].secret
    with QueueCore(secret, api) as pq:
        pq.topics.create("logged", partitions=1, delivery="at-least-once")
        pq.publish_batch("logged", [1, 2, 3])
        with pq.consume("logged", "g", start_from="earliest") as consumer:
            held = [m for _, m in zip(range(3), consumer, strict=False)]
            # Another hand removes the member: its leases end, and the seek drops them.
            member = f"{api}/v1/topics/logged/groups/g/members/{consumer.member_id}"
            assert httpx.delete(member, headers=bearer(secret)).status_code == 204
            pq.offsets.seek("logged", "g", partition=0, offset=3)
            for message in held:
                message.ack()
            eventually(lambda: bool(caplog.records), 5, "the refusal was logged")
            time.sleep(0.3)
    lines = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert "3 of 3 refused" in lines[0].getMessage()
    assert lines[0].exc_info is None


def test_what_a_consumer_holds_never_exceeds_its_window(api: str, dev: NewOrganisation) -> None:
    peak = 0
    lock = threading.Lock()
    with QueueCore(dev.keys["production"].secret, api) as pq:
        pq.topics.create("bounded", partitions=2)
        pq.publish_batch("bounded", list(range(200)))
        consumer = pq.consume("bounded", "g", start_from="earliest", concurrency=2)
        done = threading.Event()
        count = collections.Counter[int]()

        @consumer.on_message
        def handle(message: Any) -> None:
            nonlocal peak
            with lock:
                peak = max(peak, consumer.held)
                count[message.data] += 1
                if len(count) == 200:
                    done.set()
            message.ack()

        consumer.start()
        assert done.wait(60), len(count)
        consumer.stop()
    assert 1 <= peak <= 20  # 10 per handler, two handlers
