"""Two replicas, one group: the coordinator's state is in PostgreSQL, so members that reached
different replicas form one generation and split the partitions."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer

from tests.kafka_protocol.conftest import KafkaApi, Tenant, create_topic, librdkafka, start_server
from tests.support.processes import stop
from tests.support.services import Services


def test_members_on_two_replicas_share_one_group(
    kafka_api: KafkaApi,
    services: Services,
    tenant: Tenant,
    tmp_path: Path,
    unique: Callable[[str], str],
) -> None:
    other, proc = start_server(services, tmp_path / "replica")
    try:
        topic, group = unique("two"), unique("g")
        create_topic(kafka_api, tenant, topic, partitions=4)
        fast = {"group.id": group, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
        first = Consumer(librdkafka(kafka_api, tenant.key, **fast))
        second = Consumer(librdkafka(other, tenant.key, **fast))
        first.subscribe([topic])
        second.subscribe([topic])
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            first.poll(0.1)
            second.poll(0.1)
            mine = {tp.partition for tp in first.assignment()}
            theirs = {tp.partition for tp in second.assignment()}
            if len(mine) == 2 and len(theirs) == 2:
                break
        first.close()
        second.close()
    finally:
        stop(proc)
    assert mine | theirs == {0, 1, 2, 3} and not mine & theirs
