"""Starting and stopping the Kafka listeners of one ``queuecore serve`` process."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from core.settings import KafkaSettings
from kafka_protocol.server import KafkaServer
from kafka_protocol.session import Listener, Services


def tls_context(settings: KafkaSettings) -> ssl.SSLContext:
    """The server side of SASL_SSL, from the configured certificate chain and key."""
    assert settings.tls_cert is not None and settings.tls_key is not None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.tls_cert, settings.tls_key)
    return context


def servers(services: Services, settings: KafkaSettings) -> list[KafkaServer]:
    """SASL_PLAINTEXT on the Kafka port (if not 0), SASL_SSL on the TLS port (with a cert)."""
    found = []
    if settings.port > 0:
        advertised = Listener(settings.advertised_host, settings.advertised_port, tls=False)
        found.append(KafkaServer(services, settings.host, settings.port, advertised))
    if settings.tls_enabled:
        advertised = Listener(settings.advertised_host, settings.tls_port, tls=True)
        found.append(
            KafkaServer(
                services, settings.host, settings.tls_port, advertised, tls_context(settings)
            )
        )
    return found


@asynccontextmanager
async def kafka_listeners(services: Services, settings: KafkaSettings) -> AsyncIterator[None]:
    """Serve the Kafka protocol while the block runs."""
    running = servers(services, settings)
    try:
        for server in running:
            await server.start()
        yield
    finally:
        for server in running:
            await server.close()
