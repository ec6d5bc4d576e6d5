"""``AsyncQueueCore`` itself: pull fallback, retried publishes, handler failures, events."""

from __future__ import annotations

import asyncio

import pytest
from queuecore import AsyncMessage, AsyncQueueCore

from tenants.models import NewOrganisation
from tests.support.http_faults import faulty_proxy

pytestmark = pytest.mark.e2e


def is_stream(method: str, path: str) -> bool:
    """The SSE route (its query names the member's window)."""
    return method == "GET" and path.partition("?")[0].endswith("/stream")


def is_publish(method: str, path: str) -> bool:
    """The single-message publish route."""
    return method == "POST" and path.endswith("/messages")


async def collect(pq: AsyncQueueCore, topic: str, count: int, **options: object) -> list[int]:
    """Consume ``count`` messages of ``topic`` (acking each) and return their data."""
    got: list[int] = []
    async with pq.consume(topic, "g", start_from="earliest", **options) as consumer:  # type: ignore[arg-type]
        async for message in consumer:
            got.append(message.data)
            await message.ack()
            if len(got) == count:
                break
    return got


def test_a_consumer_falls_back_to_pulls_when_the_server_has_no_stream(
    api: str, org: NewOrganisation
) -> None:
    async def scenario(url: str) -> list[int]:
        async with AsyncQueueCore(org.keys["production"].secret, url) as pq:
            await pq.topics.create("fallback", partitions=1)
            await pq.publish_batch("fallback", [0, 1, 2])
            return await asyncio.wait_for(collect(pq, "fallback", 3, wait=1.0), 30)

    with faulty_proxy(api, is_stream, times=100, fail_with=501) as proxy:
        assert asyncio.run(scenario(proxy.url)) == [0, 1, 2]
    assert len(proxy.spoiled) == 1  # one refused stream, then pulls only
    assert any(path.endswith("/pull") for _, path in proxy.received)


def test_a_publish_answered_503_is_retried_with_its_key_and_stored_once(
    api: str, org: NewOrganisation
) -> None:
    async def scenario(url: str) -> tuple[str | None, int]:
        async with AsyncQueueCore(org.keys["production"].secret, url) as pq:
            await pq.topics.create("retried", partitions=1)
            sent = await pq.publish("retried", {"charge": 1})
            depth = (await pq.topics.describe("retried")).stats
            assert depth is not None
            return sent.idempotency_key, depth.depth

    with faulty_proxy(api, is_publish, times=1, fail_with=503) as proxy:
        key, depth = asyncio.run(scenario(proxy.url))
    assert key is not None and key.startswith("sdk_")
    assert proxy.received.count(("POST", "/v1/topics/retried/messages")) == 2
    assert depth == 1


def test_a_failing_async_handler_nacks_with_its_error_text_into_the_dlq(
    api: str, org: NewOrganisation
) -> None:
    async def scenario() -> tuple[list[str], str, int, list[int]]:
        events: list[str] = []
        async with AsyncQueueCore(org.keys["production"].secret, api) as pq:
            await pq.topics.create("poison", partitions=1)
            sent = await pq.publish("poison", {"amount": -1})
            consumer = pq.consume(
                "poison",
                "g",
                start_from="earliest",
                dead_letter={"max_retries": 1, "retry_delay": "50ms"},
            )
            attempts: list[int] = []

            @consumer.on_message
            async def handle(message: AsyncMessage) -> None:
                attempts.append(message.attempt)
                raise ValueError("amount must be positive")

            consumer.on("error", lambda exc: events.append(type(exc).__name__))
            consumer.on("connected", lambda: events.append("connected"))
            await consumer.start()
            for _ in range(300):
                page = await pq.dlq.inspect("poison", "g")
                if page.depth:
                    break
                await asyncio.sleep(0.05)
            await consumer.stop()
            [dead] = page.messages
            assert dead.message_id == sent.message_id
            return events, dead.error, dead.attempts, attempts

    events, error, dead_attempts, attempts = asyncio.run(scenario())
    assert error == "ValueError: amount must be positive" and dead_attempts == 2
    assert attempts == [1, 2]
    assert events[0] == "connected" and events.count("ValueError") == 2


def never(method: str, path: str) -> bool:
    """Spoil nothing: the proxy only counts."""
    return False


def test_concurrent_handlers_share_ack_requests(api: str, org: NewOrganisation) -> None:
    async def scenario(url: str) -> tuple[int, int]:
        async with AsyncQueueCore(org.keys["production"].secret, url) as pq:
            await pq.topics.create("busy", partitions=2)
            await pq.publish_batch("busy", list(range(60)))
            done, acked = asyncio.Event(), set()
            consumer = pq.consume(
                "busy", "g", start_from="earliest", stream=False, batch_size=30, wait=1.0
            )

            @consumer.on_message
            async def handle(message: AsyncMessage) -> None:
                await asyncio.sleep(0.05)  # slow work: the other handlers ack meanwhile
                await message.ack()
                acked.add(message.data)
                if len(acked) == 60:
                    done.set()

            await consumer.start(concurrency=20)
            await asyncio.wait_for(done.wait(), 30)
            await consumer.stop()
            lag = sum(o.lag for o in await pq.offsets.get("busy", "g"))
            return len(acked), lag

    with faulty_proxy(api, never) as proxy:
        acked, lag = asyncio.run(scenario(proxy.url))
    assert (acked, lag) == (60, 0)
    ack_requests = sum(1 for method, path in proxy.received if path.endswith("/ack"))
    assert 1 <= ack_requests <= 20, ack_requests  # 60 acks, far fewer requests


def test_an_unknown_publish_outcome_is_its_own_retryable_error() -> None:
    from queuecore import PublishOutcomeUnknown, Unavailable
    from queuecore.errors import error_class

    assert error_class("PUBLISH_OUTCOME_UNKNOWN", 503) is PublishOutcomeUnknown
    assert issubclass(PublishOutcomeUnknown, Unavailable)  # retried like any safe 503
    assert error_class("SERVICE_UNAVAILABLE", 503) is Unavailable
