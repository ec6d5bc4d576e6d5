"""Kafka producers in the fault history: aiokafka, idempotent, ``acks=all``, one per replica,
producing ``{"pid", "a"}`` JSON records to the exactly-once topic, each send recorded as a
publish. A send that raises is an unknown outcome (a Kafka client cannot tell "not written" from
"answer lost"), so the checker holds every acknowledged record to the same promises as REST
publishes: never lost, never stored twice (the client's own retries go through the producer id
and sequence numbers), offsets consistent."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaProducer

from tests.faults.history import OK, UNKNOWN

if TYPE_CHECKING:
    from tests.faults.workload import Workload

EXACTLY_ONCE = "faults.eo"
SEND_TIMEOUT_S = 20.0


def kafka_pid(producer: int, seq: int) -> str:
    """The payload id of a Kafka producer's record: distinct from the REST producers' ids."""
    return f"x{producer}-{seq}"


async def kafka_producer(workload: Workload, number: int) -> None:
    """Produce until the workload stops, reconnecting after any failure."""
    rng = random.Random(workload.config.seed * 7919 + number)
    bootstrap = workload.bootstraps[number % len(workload.bootstraps)]
    seq = 0
    while workload.running():
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="queuecore",
            sasl_plain_password=workload.api_key,
            enable_idempotence=True,
            acks="all",
            request_timeout_ms=int(workload.config.request_timeout_s * 1000),
        )
        try:
            await asyncio.wait_for(producer.start(), SEND_TIMEOUT_S)
        except Exception:
            await _stop(producer)
            await asyncio.sleep(0.5)
            continue
        seq = await _produce(workload, producer, number, seq, rng)
        await _stop(producer)


async def _produce(
    workload: Workload, producer: AIOKafkaProducer, number: int, seq: int, rng: random.Random
) -> int:
    while workload.running():
        pid = kafka_pid(number, seq)
        seq += 1
        key = rng.choice([None, b"a", b"b"])
        op = workload.recorder.invoke(
            "publish",
            f"kafka{number}",
            topic=EXACTLY_ONCE,
            items=[{"pid": pid, "ikey": None}],
            attempt=1,
            replica=number % len(workload.bootstraps),
            key=None if key is None else key.decode(),
            via="kafka",
        )
        value = b'{"pid":"%s","a":1}' % pid.encode()
        try:
            sent = await asyncio.wait_for(
                producer.send_and_wait(EXACTLY_ONCE, value, key=key), SEND_TIMEOUT_S
            )
        except Exception as exc:
            workload.recorder.complete(op, UNKNOWN, results=[], status=type(exc).__name__)
            return seq
        results = [{"partition": sent.partition, "offset": sent.offset}]
        workload.recorder.complete(op, OK, results=results, status="kafka")
        await asyncio.sleep(rng.uniform(0.0, 0.05))
    return seq


async def _stop(producer: AIOKafkaProducer) -> None:
    try:
        await asyncio.wait_for(producer.stop(), 5)
    except Exception:  # a producer that cannot flush is abandoned; its sends were recorded
        return
