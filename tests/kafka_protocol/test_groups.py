"""Classic consumer groups with real clients: rebalances as members come and go, commit and
resume, the group in the REST API; kafka-python and aiokafka end to end."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, ConsumerGroupState, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from data_plane.write.publish import partition_for_key
from tests.kafka_protocol.conftest import (
    KafkaApi,
    Tenant,
    create_topic,
    librdkafka,
    poll_all,
    python_client,
)

Names = Callable[[str], str]
FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def fill(api: KafkaApi, tenant: Tenant, topic: str, count: int, start: int = 0) -> None:
    producer = Producer(librdkafka(api, tenant.key))
    for i in range(start, start + count):
        producer.produce(topic, json.dumps({"n": i}).encode(), key=str(i).encode())
    assert producer.flush(30) == 0


def assigned_within(consumer: Consumer, wanted: int, timeout_s: float = 30) -> set[int]:
    """Poll until the consumer owns ``wanted`` partitions; the partitions it owns."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer.poll(0.2)
        owned = {tp.partition for tp in consumer.assignment()}
        if len(owned) == wanted:
            return owned
    return {tp.partition for tp in consumer.assignment()}


def test_partitions_move_as_members_come_and_go(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic, group = unique("rb"), unique("g")
    create_topic(kafka_api, tenant, topic, partitions=4)
    settings = librdkafka(kafka_api, tenant.key, **{"group.id": group, **FAST_GROUP})
    first = Consumer(settings)
    first.subscribe([topic])
    assert assigned_within(first, 4) == {0, 1, 2, 3}

    second = Consumer(settings)
    second.subscribe([topic])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # both poll, so both take part in the rebalance
        first.poll(0.1)
        second.poll(0.1)
        mine = {tp.partition for tp in first.assignment()}
        theirs = {tp.partition for tp in second.assignment()}
        if len(mine) == 2 and len(theirs) == 2:
            break
    assert mine | theirs == {0, 1, 2, 3} and not mine & theirs
    admin = AdminClient(librdkafka(kafka_api, tenant.key))
    listed = admin.list_consumer_groups().result(timeout=15).valid
    (described,) = admin.describe_consumer_groups([group]).values()
    description = described.result(timeout=15)
    assert group in {g.group_id for g in listed}
    assert description.state == ConsumerGroupState.STABLE and len(description.members) == 2

    second.close()  # LeaveGroup: the survivor takes everything back
    assert assigned_within(first, 4) == {0, 1, 2, 3}
    first.close()


def test_a_group_resumes_from_its_commits_and_shows_in_rest(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic, group = unique("resume"), unique("g")
    create_topic(kafka_api, tenant, topic, partitions=2)
    fill(kafka_api, tenant, topic, 10)
    settings = librdkafka(
        kafka_api,
        tenant.key,
        **{
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **FAST_GROUP,
        },
    )
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    first = poll_all(consumer, 10)
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(json.loads(m.value())["n"] for m in first) == list(range(10))

    fill(kafka_api, tenant, topic, 4, start=10)
    with tenant.rest(kafka_api.base) as rest:
        listed = {g["name"]: g for g in rest.get(f"/topics/{topic}/groups").json()}
        offsets = rest.get(f"/topics/{topic}/groups/{group}/offsets").json()
    assert listed[group]["lag"] == 4  # committed through 10, 14 published
    assert sum(p["current"] for p in offsets["partitions"]) == 10
    assert sum(p["lag"] for p in offsets["partitions"]) == 4
    with tenant.rest(kafka_api.base) as rest:
        joined = rest.post(f"/topics/{topic}/groups/{group}/members", json={})
    assert joined.status_code == 409  # REST members do not join a Kafka group

    again = Consumer(settings)
    again.subscribe([topic])
    rest_of = poll_all(again, 4)
    assert poll_all(again, 1, timeout_s=2) == []
    again.close()
    assert sorted(json.loads(m.value())["n"] for m in rest_of) == [10, 11, 12, 13]


def test_kafka_python_produces_consumes_and_commits(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic, group = unique("kp"), unique("g")
    create_topic(kafka_api, tenant, topic, partitions=3)
    producer = KafkaProducer(**python_client(kafka_api, tenant.key), compression_type="gzip")
    sent = [
        producer.send(topic, b'{"kp": %d}' % i, key=b"k%d" % i, headers=[("h", b"1")])
        for i in range(9)
    ]
    placed = [future.get(timeout=30) for future in sent]
    producer.close()
    # kafka-python's default partitioner is Java's murmur2: the same partition REST picks
    assert [p.partition for p in placed] == [partition_for_key(b"k%d" % i, 3) for i in range(9)]

    consumer = KafkaConsumer(
        topic,
        **python_client(kafka_api, tenant.key),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20000,
    )
    got = []
    for message in consumer:
        got.append((message.key, message.value, message.headers))
        if len(got) == 9:
            break
    consumer.commit()
    committed = sum(consumer.committed(tp) or 0 for tp in consumer.assignment())
    consumer.close()
    assert sorted(got) == sorted((b"k%d" % i, b'{"kp": %d}' % i, [("h", b"1")]) for i in range(9))
    assert committed == 9


def test_aiokafka_produces_consumes_and_commits(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic, group = unique("aio"), unique("g")
    create_topic(kafka_api, tenant, topic, partitions=2)

    async def run() -> tuple[list[bytes | None], int]:
        producer = AIOKafkaProducer(**python_client(kafka_api, tenant.key), compression_type="zstd")
        await producer.start()
        for i in range(6):
            await producer.send_and_wait(topic, b"\x00raw%d" % i, key=b"%d" % i)
        await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            **python_client(kafka_api, tenant.key),
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        values = []
        try:
            async with asyncio.timeout(30):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 6:
                        break
            await consumer.commit()
            committed = 0
            for tp in consumer.assignment():
                committed += await consumer.committed(tp) or 0
        finally:
            await consumer.stop()
        return values, committed

    values, committed = asyncio.run(run())
    assert sorted(values) == sorted(b"\x00raw%d" % i for i in range(6))
    assert committed == 6
