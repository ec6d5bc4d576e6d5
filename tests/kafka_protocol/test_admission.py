"""A Kafka produce waits behind its organisation's own publishes in the works, as a REST publish
does, while another organisation shares the replica (control_plane.edge.admission)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import msgspec
from confluent_kafka import Producer

from tests.kafka_protocol.conftest import KafkaApi, Tenant, create_topic, librdkafka
from tests.support.services import Services
from tests.support.tenancy import new_organisation

HELD_BYTES = 200_000  # far over a Developer organisation's room (32 KiB for weight 1)


def developer(services: Services) -> Tenant:
    made = new_organisation(services.database_url, tier="developer")
    return Tenant(made.keys["production"].secret, made.organisation.id)


def held_publish(api: KafkaApi, tenant: Tenant, topic: str) -> tuple[socket.socket, bytes]:
    """A REST batch publish whose headers are sent and whose body is held back: admitted, its
    size counts against its organisation until it is answered. The socket and the rest."""
    data = "x" * 40_000
    body = msgspec.json.encode({"messages": [{"data": data} for _ in range(4)]})
    body += b" " * (HELD_BYTES - len(body))  # JSON allows trailing whitespace
    url = urlsplit(api.base)
    head = (
        f"POST /v1/topics/{topic}/messages/batch HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {tenant.key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    sock.sendall(head + body[:20])
    return sock, body[20:]


def test_a_produce_waits_behind_its_organisations_publishes_in_the_works(
    kafka_api: KafkaApi, services: Services
) -> None:
    flooding, other = developer(services), developer(services)
    create_topic(kafka_api, flooding, "admitted")
    create_topic(kafka_api, other, "beside")
    delivered: list[str | None] = []
    producer = Producer(librdkafka(kafka_api, flooding.key, **{"acks": "all", "linger.ms": 0}))

    def report(error: object, _message: object) -> None:
        delivered.append(None if error is None else str(error))

    producer.produce("admitted", b"warm-up", on_delivery=report)
    assert producer.flush(30) == 0 and delivered == [None]  # connected, authenticated

    sock, rest = held_publish(kafka_api, flooding, "admitted")
    try:
        time.sleep(0.5)  # the held request is admitted once its headers are read
        with other.rest(kafka_api.base) as rest_client:  # another organisation shares it now
            answer = rest_client.post("/topics/beside/messages", json={"data": "hello"})
            assert answer.status_code == 201, answer.text
        producer.produce("admitted", b"behind", on_delivery=report)
        assert producer.flush(2) == 1, (
            "the produce was answered with the organisation over its room"
        )
        assert delivered == [None]
        sock.sendall(rest)  # the held publish completes and is answered
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
        assert b" 201 " in status_line, status_line
    finally:
        sock.close()
    assert producer.flush(30) == 0
    assert delivered == [None, None]
    with flooding.rest(kafka_api.base) as rest_client:
        page = rest_client.get("/topics/admitted/partitions/0/messages", params={"limit": 10})
    assert page.status_code == 200, page.text
    stored = [m["data"] for m in page.json()["messages"]]
    assert len(stored) == 6  # warm-up, the four held, then the produce that waited for them
    assert [len(data) for data in stored[1:5]] == [40_000] * 4
    assert len(stored[5]) < 40_000
