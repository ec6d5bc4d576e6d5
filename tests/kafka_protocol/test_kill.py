"""The API killed mid-produce: no record librdkafka saw acknowledged is lost, and the idempotent
producer's retries after the restart store nothing twice."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_protocol.conftest import Tenant, browse, librdkafka, start_server
from tests.support.processes import descendants, stop
from tests.support.services import Services

pytestmark = pytest.mark.e2e
RECORDS = 400


def test_no_acknowledged_record_is_lost_when_the_api_is_killed(
    services: Services, tenant: Tenant, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    api, proc = start_server(services, tmp_path / "first")
    topic = unique("kill")
    with tenant.rest(api.base) as rest:
        assert rest.post("/topics", json={"name": topic, "partitions": 2}).status_code == 201
    acked: dict[int, tuple[int, int]] = {}
    failed: list[int] = []

    def report(err: object, msg: object) -> None:
        n = json.loads(msg.value())["n"]  # type: ignore[attr-defined]
        if err is None:
            acked[n] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
        else:
            failed.append(n)

    settings = {"enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000}
    producer = Producer(librdkafka(api, tenant.key, **settings))

    def produce() -> None:
        for n in range(RECORDS):
            producer.produce(topic, json.dumps({"n": n}).encode(), on_delivery=report)
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(90)

    thread = threading.Thread(target=produce)
    thread.start()
    while len(acked) < RECORDS // 4:
        time.sleep(0.01)
    for child in [*descendants(proc.pid)]:
        child.send_signal(signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    killed_at = len(acked)
    _, again = start_server(
        services, tmp_path / "second", (int(api.base.rsplit(":", 1)[1]), api.port)
    )
    try:
        thread.join(120)
        assert not thread.is_alive()
        stored: dict[int, list[tuple[int, int]]] = {}
        for partition in (0, 1):
            for message in browse(api, tenant, topic, partition)["messages"]:
                stored.setdefault(message["data"]["n"], []).append((partition, message["offset"]))
    finally:
        stop(again)
    assert killed_at < RECORDS  # the kill happened mid-produce
    lost = [n for n, where in acked.items() if stored.get(n) != [where]]
    assert lost == [], f"acknowledged records missing or moved: {lost[:10]}"
    twice = [n for n, where in stored.items() if len(where) > 1]
    assert twice == [], f"records stored twice: {twice[:10]}"
    assert len(acked) + len(failed) == RECORDS
