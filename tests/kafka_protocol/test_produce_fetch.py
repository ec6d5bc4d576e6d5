"""Producing and fetching with real Kafka clients against a real ``queuecore serve``: every
compression, keys and headers, idempotent producers, REST <-> Kafka both ways, offsets."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from data_plane.write.publish import partition_for_key
from kafka_protocol.versions import Api
from tests.kafka_protocol.conftest import (
    KafkaApi,
    Tenant,
    browse,
    create_topic,
    librdkafka,
    poll_all,
)
from tests.kafka_protocol.raw import RawClient, batch_of

Names = Callable[[str], str]


def produce_all(
    producer: Producer, topic: str, items: list[tuple[bytes | None, bytes | None, list]]
) -> list:
    """Produce and wait; the delivery reports (error, partition, offset) in produce order."""
    reports: list = [None] * len(items)

    def report(index: int) -> Callable:
        return lambda err, msg: reports.__setitem__(index, (err, msg.partition(), msg.offset()))

    for index, (key, value, headers) in enumerate(items):
        producer.produce(topic, value, key=key, headers=headers or None, on_delivery=report(index))
    assert producer.flush(30) == 0
    return reports


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_each_compression_round_trips_keys_and_headers(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names, codec: str
) -> None:
    topic = unique(f"c-{codec}")
    create_topic(kafka_api, tenant, topic, partitions=3)
    # murmur2_random is librdkafka's Java-compatible partitioner (its default hashes with CRC32)
    settings = {"compression.type": codec, "linger.ms": 20, "partitioner": "murmur2_random"}
    producer = Producer(librdkafka(kafka_api, tenant.key, **settings))
    items = [
        (
            f"key-{i}".encode(),
            json.dumps({"i": i, "pad": "x" * 200}).encode(),
            [("n", str(i).encode())],
        )
        for i in range(30)
    ]
    reports = produce_all(producer, topic, items)
    assert [err for err, _, _ in reports] == [None] * 30
    for (key, _, _), (_, partition, _) in zip(items, reports, strict=True):
        assert partition == partition_for_key(key, 3)  # Kafka's murmur2, as REST places keys

    consumer = Consumer(
        librdkafka(
            kafka_api, tenant.key, **{"group.id": unique("g"), "auto.offset.reset": "earliest"}
        )
    )
    consumer.subscribe([topic])
    got = poll_all(consumer, 30)
    consumer.close()
    seen = {m.key(): (m.value(), m.headers()) for m in got}
    assert seen == {key: (value, headers) for key, value, headers in items}


def test_rest_messages_are_records_and_records_are_rest_messages(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic = unique("both")
    create_topic(kafka_api, tenant, topic)
    with tenant.rest(kafka_api.base) as rest:
        sent = rest.post(
            f"/topics/{topic}/messages",
            json={
                "data": {"type": "order.created", "amount": 9900},
                "key": "ord_1",
                "headers": {"h": "v"},
            },
        )
        assert sent.status_code == 201
    producer = Producer(librdkafka(kafka_api, tenant.key))
    reports = produce_all(
        producer,
        topic,
        [
            (b"k2", b'{"kafka": true}', []),
            (None, b"\x00\xffnot json", [("bin", b"1")]),
            (b"k3", None, []),
        ],
    )
    assert [offset for _, _, offset in reports] == [1, 2, 3]  # the same numbers as REST's

    page = browse(kafka_api, tenant, topic)["messages"]
    assert [m["offset"] for m in page] == [0, 1, 2, 3]
    assert (
        page[1]["data"] == {"kafka": True} and page[1]["key"] == "k2" and "encoding" not in page[1]
    )
    assert page[2]["data"] == "AP9ub3QganNvbg==" and page[2]["encoding"] == "base64"
    assert page[2]["headers"] == {"bin": "1"}
    assert page[3]["data"] is None and page[3]["key"] == "k3"

    consumer = Consumer(
        librdkafka(
            kafka_api, tenant.key, **{"group.id": unique("g"), "auto.offset.reset": "earliest"}
        )
    )
    consumer.subscribe([topic])
    got = poll_all(consumer, 4)
    consumer.close()
    assert got[0].value() == b'{"type":"order.created","amount":9900}'  # compact JSON of data
    assert (got[0].key(), got[0].headers(), got[0].offset()) == (b"ord_1", [("h", b"v")], 0)
    assert [m.value() for m in got[1:]] == [b'{"kafka": true}', b"\x00\xffnot json", None]


def test_an_idempotent_producer_stores_each_record_once(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic = unique("idem")
    create_topic(kafka_api, tenant, topic, partitions=2)
    producer = Producer(
        librdkafka(kafka_api, tenant.key, **{"enable.idempotence": True, "linger.ms": 5})
    )
    reports = produce_all(producer, topic, [(str(i).encode(), b"%d" % i, []) for i in range(200)])
    assert all(err is None for err, _, _ in reports)
    stored = sum(len(browse(kafka_api, tenant, topic, p)["messages"]) for p in (0, 1))
    assert stored == 200


def idempotent_producer(kafka_api: KafkaApi, tenant: Tenant) -> tuple[RawClient, int]:
    """A logged-in raw connection and a producer id from InitProducerId."""
    raw = RawClient(kafka_api.bootstrap)
    assert raw.login(tenant.key).error_code == 0
    producer = raw.request(
        Api.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=60000
    )
    return raw, producer.producer_id


def test_a_retried_batch_is_answered_with_its_first_offsets(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic = unique("retry")
    create_topic(kafka_api, tenant, topic)
    raw, pid = idempotent_producer(kafka_api, tenant)
    first = batch_of([b"1", b"2", b"3"], pid, 0)
    _, answer = raw.produce(topic, 0, first)
    _, again = raw.produce(topic, 0, first)  # a retry after a lost answer
    _, next_batch = raw.produce(topic, 0, batch_of([b"4"], pid, 3))
    _, gap = raw.produce(topic, 0, batch_of([b"9"], pid, 7))
    raw.close()
    assert (answer.error_code, answer.base_offset) == (0, 0)
    assert (again.error_code, again.base_offset) == (0, 0)
    assert (next_batch.error_code, next_batch.base_offset) == (0, 3)
    assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert [m["data"] for m in browse(kafka_api, tenant, topic)["messages"]] == [1, 2, 3, 4]


def test_pipelined_batches_of_one_producer_are_stored_in_their_order(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    """Four batches in flight at once on one connection (the first one being written as the
    others arrive): each follows the one sent before it, none is refused as out of order."""
    topic = unique("pipelined")
    create_topic(kafka_api, tenant, topic)
    raw, pid = idempotent_producer(kafka_api, tenant)
    batches = [batch_of([b"%d" % (2 * n), b"%d" % (2 * n + 1)], pid, 2 * n) for n in range(4)]
    answers = raw.produce_pipelined(topic, 0, batches, pause_s=0.002)
    raw.close()
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, 0), (0, 2), (0, 4), (0, 6)]
    assert [m["data"] for m in browse(kafka_api, tenant, topic)["messages"]] == list(range(8))


def test_offsets_earliest_latest_and_by_time(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic = unique("offs")
    create_topic(kafka_api, tenant, topic)
    producer = Producer(librdkafka(kafka_api, tenant.key))
    produce_all(producer, topic, [(None, b"1", []), (None, b"2", [])])
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce_all(producer, topic, [(None, b"3", [])])
    consumer = Consumer(librdkafka(kafka_api, tenant.key, **{"group.id": unique("g")}))
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 3)
    (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, middle_ms)], timeout=10)
    (future,) = consumer.offsets_for_times(
        [TopicPartition(topic, 0, middle_ms + 60_000)], timeout=10
    )
    consumer.close()
    assert found.offset == 2
    assert future.offset == -1  # nothing at or after that moment


def test_a_waiting_fetch_wakes_on_a_rest_publish(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic = unique("wake")
    create_topic(kafka_api, tenant, topic)
    consumer = Consumer(
        librdkafka(
            kafka_api,
            tenant.key,
            **{"group.id": unique("g"), "auto.offset.reset": "latest", "fetch.wait.max.ms": 20000},
        )
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    assert poll_all(consumer, 1, timeout_s=2) == []  # the fetch is now waiting on the listener
    with tenant.rest(kafka_api.base) as rest:
        started = time.monotonic()
        assert rest.post(f"/topics/{topic}/messages", json={"data": "hello"}).status_code == 201
    (message,) = poll_all(consumer, 1, timeout_s=10)
    consumer.close()
    assert message.value() == b'"hello"'
    assert time.monotonic() - started < 5  # woken, not at the end of its 20 s wait


def test_unknown_api_versions_get_a_v0_answer_with_the_supported_ranges(
    kafka_api: KafkaApi,
) -> None:
    import struct

    raw = RawClient(kafka_api.bootstrap)
    frame = struct.pack(">hhih", Api.API_VERSIONS, 99, 7, 4) + b"test"
    answer = raw.send_frame(frame)
    raw.close()
    correlation, error, count = struct.unpack_from(">ihi", answer)
    assert (correlation, error) == (7, 35)  # UNSUPPORTED_VERSION, in the v0 format
    ranges = [struct.unpack_from(">hhh", answer, 10 + 6 * i) for i in range(count)]
    assert (Api.API_VERSIONS, 0, 3) in ranges and (Api.PRODUCE, 3, 9) in ranges


def test_acks_zero_is_stored_unanswered_and_tier_sizes_apply(
    kafka_api: KafkaApi, tenant: Tenant, unique: Names
) -> None:
    topic = unique("acks0")
    create_topic(kafka_api, tenant, topic)
    raw = RawClient(kafka_api.bootstrap)
    raw.login(tenant.key)
    raw.produce_unacknowledged(topic, 0, batch_of([b'"fire"', b'"forget"']))
    _, too_big = raw.produce(topic, 0, batch_of([b"x" * (1024 * 1024 + 1)]))  # Pro: 1 MiB
    _, after = raw.produce(topic, 0, batch_of([b'"after"']))
    raw.close()
    assert too_big.error_code == 10  # MESSAGE_TOO_LARGE, and nothing of it stored
    assert after.error_code == 0
    stored = [m["data"] for m in browse(kafka_api, tenant, topic)["messages"]]
    assert sorted(stored) == ["after", "fire", "forget"]
