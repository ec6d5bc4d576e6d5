"""Smoke: librdkafka produces and consumes through the listener."""

from __future__ import annotations

import json
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from tests.kafka_protocol.conftest import KafkaApi, Tenant


def sasl(api: KafkaApi, key: str) -> dict[str, str]:
    return {
        "bootstrap.servers": api.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "queuecore",
        "sasl.password": key,
    }


def test_librdkafka_round_trip(kafka_api: KafkaApi, tenant: Tenant, unique: Callable[[str], str]) -> None:
    topic = unique("orders")
    with tenant.rest(kafka_api.base) as rest:
        assert rest.post("/topics", json={"name": topic, "partitions": 2}).status_code == 201
    producer = Producer({**sasl(kafka_api, tenant.key), "debug": "protocol,broker", "log_level": 7})
    reports = []
    for i in range(10):
        producer.produce(topic, json.dumps({"n": i}).encode(), key=f"k{i}".encode(), on_delivery=lambda e, m: reports.append((e, m.partition(), m.offset())))
    assert producer.flush(30) == 0
    assert all(e is None for e, _, _ in reports), reports
    consumer = Consumer({**sasl(kafka_api, tenant.key), "group.id": unique("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    for _ in range(60):
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            got.append(json.loads(msg.value()))
        if len(got) == 10:
            break
    consumer.close()
    assert sorted(m["n"] for m in got) == list(range(10))


def test_other_clients(kafka_api: KafkaApi, tenant: Tenant, unique: Callable[[str], str], tmp_path) -> None:
    import subprocess, sys
    topic = unique("kp")
    with tenant.rest(kafka_api.base) as rest:
        assert rest.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    out = subprocess.run([sys.executable, "/tmp/kp_smoke.py", kafka_api.bootstrap, tenant.key, topic], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    print(out.stdout, out.stderr[-5000:])
    assert out.returncode == 0
