"""SASL_SSL: with a certificate configured, a second listener speaks TLS; librdkafka verifies
the certificate against its CA, authenticates with an API key and round-trips a record."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trustme
from confluent_kafka import Consumer, Producer, TopicPartition

from infra.embedded import free_port_block
from tests.kafka_protocol.conftest import Tenant, create_topic, poll_all, start_server
from tests.support.processes import stop
from tests.support.services import Services


def test_sasl_ssl_round_trip(
    services: Services, tenant: Tenant, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    chain, key, authority = tmp_path / "chain.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_pem.write_to_path(str(key))
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(authority))
    tls_port = free_port_block()
    extra = {
        "QUEUECORE_KAFKA_TLS_CERT": str(chain),
        "QUEUECORE_KAFKA_TLS_KEY": str(key),
        "QUEUECORE_KAFKA_TLS_PORT": str(tls_port),
    }
    api, proc = start_server(services, tmp_path / "serve", extra=extra)
    try:
        topic = unique("tls")
        create_topic(api, tenant, topic)
        settings = {
            "bootstrap.servers": f"127.0.0.1:{tls_port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(authority),
            "sasl.mechanism": "PLAIN",
            "sasl.username": "queuecore",
            "sasl.password": tenant.key,
        }
        producer = Producer(settings)
        producer.produce(topic, b'{"secure": true}')
        assert producer.flush(20) == 0
        consumer = Consumer({**settings, "group.id": unique("g")})
        consumer.assign([TopicPartition(topic, 0, 0)])
        (message,) = poll_all(consumer, 1, timeout_s=20)
        consumer.close()
        assert message.value() == b'{"secure": true}'
        # A plaintext client on the TLS port gets nowhere.
        plain = Producer({**settings, "security.protocol": "SASL_PLAINTEXT"})
        metadata_error = None
        try:
            plain.list_topics(timeout=3)
        except Exception as exc:
            metadata_error = exc
        assert metadata_error is not None
    finally:
        stop(proc)
