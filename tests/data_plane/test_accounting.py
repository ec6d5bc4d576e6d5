"""One accounting record per publish request feeds the usage meter and the producer series."""

from __future__ import annotations

import asyncio
import uuid

import msgspec

from billing.meter import UsageMeter
from core import settings
from core.db import async_pool
from core.object_store import S3ObjectStore
from data_plane.topics import service as topic_service
from data_plane.topics.schemas import PublishRequest
from data_plane.write.accounting import Producer
from data_plane.write.publish import Published, PublishService
from data_plane.write.writer import SegmentWriter
from observability.producers import ProducerActivity
from tests.data_plane.test_writer import FAST
from tests.support.services import Services
from tests.support.tenancy import new_organisation, run_in_tx


def test_a_publish_is_counted_once_everywhere_from_its_record(services: Services) -> None:
    org = new_organisation(services.database_url, tier="pro")
    env = org.project.environment("production")
    name = f"acct.{uuid.uuid4().hex[:8]}"
    run_in_tx(
        services.database_url,
        lambda conn: topic_service.create_topic(
            conn, org.organisation.id, env.id, name, partitions=4
        ),
    )
    meter, activity = UsageMeter(), ProducerActivity()
    producer = Producer(org.project.id, "production", "key_test")
    keyed = [PublishRequest(data={"n": i}, key=f"k{i % 3}") for i in range(9)]
    single = [PublishRequest(data="hello")]

    async def publish() -> tuple[list[Published], list[Published]]:
        pool = async_pool(settings.database(), "test-accounting")
        await pool.open(wait=True)
        writer = SegmentWriter(pool, S3ObjectStore.from_settings(settings.object_store()), FAST)
        await writer.start()
        service = PublishService(pool, writer, meter)
        service.accounting.producers = activity
        try:
            batch = await service.publish(
                org.organisation.id, env.id, name, keyed, batch=True, producer=producer
            )
            one = await service.publish(org.organisation.id, env.id, name, single)
            return batch, one
        finally:
            await writer.close()
            await pool.close()

    batch, one = asyncio.run(publish())
    [usage] = meter.pending()
    assert usage.environment_id == env.id and usage.messages_in == 10
    payload = sum(len(msgspec.json.encode(r.data)) + len(r.key or "") for r in keyed + single)
    assert usage.bytes_in == payload
    rows = {int(row.tags["partition"]): row for row in activity.take_rows()}
    # The batch, counted per partition: its last offset there and how many it stored there.
    expected: dict[int, tuple[int, int]] = {}
    for stored in batch:
        last, count = expected.get(stored.partition, (-1, 0))
        expected[stored.partition] = (max(last, stored.offset), count + 1)
    assert {p: (r.fields["last_offset"], r.fields["messages"]) for p, r in rows.items()} == expected
    assert all(r.tags["producer"] == "key_test" and r.tags["topic"] == name for r in rows.values())
    assert one[0].offset >= 0  # a publish without a producer (a Kafka client's) adds no row
