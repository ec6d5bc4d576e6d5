"""A real ``queuecore serve`` with its Kafka listener, and tenants with keys, for the Kafka tests.

kafka-python's import name is ``kafka``; the tests import it, so run from the repository root
the suite sees the installed client (this repository's listener package is ``kafka_protocol``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services
from tests.support.tenancy import new_organisation


@dataclass(frozen=True)
class KafkaApi:
    """A running server: its REST base URL and its Kafka bootstrap address."""

    base: str
    bootstrap: str
    log: Path
    port: int


@dataclass(frozen=True)
class Tenant:
    """An organisation's production key."""

    key: str
    organisation_id: str

    def rest(self, base: str) -> httpx.Client:
        """A REST client with this key."""
        return httpx.Client(
            base_url=f"{base}/v1", headers={"Authorization": f"Bearer {self.key}"}, timeout=30
        )


def start_server(
    services: Services,
    root: Path,
    ports: tuple[int, int] | None = None,
    extra: dict[str, str] | None = None,
) -> tuple[KafkaApi, subprocess.Popen[bytes]]:
    """A ``queuecore serve`` (one worker) with the Kafka listener, on free ports or ``ports``
    (HTTP, Kafka: a restart on the same addresses)."""
    http_port, kafka_port = ports or (free_port_block(), free_port_block())
    root.mkdir(parents=True, exist_ok=True)
    log = root / "serve.log"
    env = {
        **services.env(),
        "QUEUECORE_HTTP_PORT": str(http_port),
        "QUEUECORE_KAFKA_PORT": str(kafka_port),
        **(extra or {}),
    }
    proc = queuecore(["serve", "--workers", "1"], env, log)
    base = f"http://127.0.0.1:{http_port}"
    wait_for(lambda: http_status(f"{base}/readyz") == 200, 60, "api ready", proc, log)
    return KafkaApi(base, f"127.0.0.1:{kafka_port}", log, kafka_port), proc


@pytest.fixture(scope="module")
def kafka_api(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaApi]:
    """A server with the Kafka listener for the module."""
    api, proc = start_server(services, tmp_path_factory.mktemp("kafka-api"))
    yield api
    stop(proc)


@pytest.fixture(scope="module")
def tenant(services: Services) -> Tenant:
    """A Pro organisation (its rates leave the tests unthrottled) and its production key."""
    made = new_organisation(services.database_url, tier="pro")
    return Tenant(made.keys["production"].secret, made.organisation.id)


def librdkafka(api: KafkaApi, key: str, **extra: object) -> dict[str, object]:
    """confluent-kafka settings for SASL_PLAINTEXT with an API key."""
    return {
        "bootstrap.servers": api.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "queuecore",
        "sasl.password": key,
        **extra,
    }


def python_client(api: KafkaApi, key: str) -> dict[str, object]:
    """kafka-python and aiokafka settings for SASL_PLAINTEXT with an API key."""
    return {
        "bootstrap_servers": api.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "queuecore",
        "sasl_plain_password": key,
    }


def create_topic(api: KafkaApi, tenant: Tenant, name: str, partitions: int = 1) -> None:
    """A topic, over REST."""
    with tenant.rest(api.base) as rest:
        answer = rest.post("/topics", json={"name": name, "partitions": partitions})
        assert answer.status_code == 201, answer.text


def poll_all(consumer: Any, count: int, timeout_s: float = 30) -> list[Any]:
    """``count`` messages from a confluent consumer (fewer if the time runs out)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message)
    return got


def browse(api: KafkaApi, tenant: Tenant, topic: str, partition: int = 0, offset: int = 0) -> Any:
    """A page of a partition's messages over REST."""
    with tenant.rest(api.base) as rest:
        answer = rest.get(
            f"/topics/{topic}/partitions/{partition}/messages",
            params={"offset": offset, "limit": 1000},
        )
    assert answer.status_code == 200, answer.text
    return answer.json()
