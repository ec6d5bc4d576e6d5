"""The durability contract, end to end, against ``queuecore serve`` processes and real services.

- A publish answered 2xx is readable at its offset after ``kill -9`` of the API and a restart.
- During an S3 outage, or a PostgreSQL outage, publishes get 503 and leave nothing readable;
  when the service is back, the SAME API process publishes again (no restart).

The outage tests stop and restart dedicated embedded PostgreSQL and SeaweedFS servers (same data
directory, same port), so the session's shared services are never disturbed.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra import migrate
from infra.embedded import EmbeddedPostgres, EmbeddedS3, free_port_block
from tests.support.processes import descendants, http_status, queuecore, stop, wait_for
from tests.support.services import Services, unavailable
from tests.support.tenancy import bearer, new_organisation

pytestmark = pytest.mark.e2e

RECOVERY_TIMEOUT_S = 60


@dataclass
class Api:
    """A running ``queuecore serve`` (one server process) and a client for it."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", headers=self.headers, timeout=30
        )

    def alive(self) -> bool:
        return self.proc.poll() is None


def start_api(env: dict[str, str], log: Path, port: int | None = None) -> Api:
    """``queuecore serve`` on ``port`` (a free one by default), ready to serve."""
    port = port or free_port_block()
    proc = queuecore(
        ["serve"],
        {**env, "QUEUECORE_HTTP_PORT": str(port), "QUEUECORE_HTTP_WORKERS": "1"},
        log,
    )
    wait_for(
        lambda: http_status(f"http://127.0.0.1:{port}/readyz") == 200,
        60,
        "queuecore serve ready",
        proc,
        log,
    )
    return Api(proc, port, log)


def kill_9(api: Api) -> None:
    """SIGKILL the server and anything it started: no shutdown hook runs."""
    for child in descendants(api.proc.pid):
        child.kill()
    api.proc.send_signal(signal.SIGKILL)
    api.proc.wait(10)


def create_topic(client: httpx.Client, name: str, partitions: int) -> None:
    response = client.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert response.status_code == 201, response.text


def partition_messages(client: httpx.Client, topic: str, partition: int) -> dict[str, Any]:
    response = client.get(
        f"/v1/topics/{topic}/partitions/{partition}/messages", params={"limit": 1000}
    )
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def publish(client: httpx.Client, topic: str, data: Any) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/messages", json={"data": data})


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "SERVICE_UNAVAILABLE"


def publish_until_stored(api: Api, topic: str, data: Any) -> dict[str, Any]:
    """Publish ``data`` until it is stored; every failure on the way must be a clean 503."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    with api.client as client:
        while True:
            response = publish(client, topic, data)
            if response.status_code == 201:
                stored: dict[str, Any] = response.json()
                return stored
            assert_unavailable(response)
            assert time.monotonic() < deadline, f"publishing did not recover: {response.text}"
            time.sleep(0.5)


# --- kill -9 -----------------------------------------------------------------------------------


def test_every_acknowledged_publish_survives_kill_9_of_the_api(
    services: Services, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    headers = bearer(org.keys["production"].secret)
    api = start_api(services.env(), tmp_path / "serve-1.log")
    api.headers = headers
    topic = unique("durable")
    acked: list[tuple[dict[str, Any], Any]] = []
    stop_publishing = threading.Event()

    def publish_continuously(worker: int) -> None:
        with api.client as client:
            for n in range(100_000):
                if stop_publishing.is_set():
                    return
                data = {"worker": worker, "n": n}
                try:
                    response = publish(client, topic, data)
                except httpx.HTTPError:
                    return  # the server died under us: this one was never acknowledged
                if response.status_code == 201:
                    acked.append((response.json(), data))

    try:
        with api.client as client:
            create_topic(client, topic, partitions=3)
            batch = client.post(
                f"/v1/topics/{topic}/messages/batch",
                json={"messages": [{"data": {"batch": i}} for i in range(10)]},
            )
            assert batch.status_code == 201, batch.text
        publishers = [
            threading.Thread(target=publish_continuously, args=(w,), daemon=True) for w in range(4)
        ]
        for thread in publishers:
            thread.start()
        wait_for(lambda: len(acked) >= 40, 30, "publishes acknowledged", api.proc, api.log)
        kill_9(api)  # while the publishers are mid-flight
        for thread in publishers:
            thread.join(30)
    finally:
        stop_publishing.set()
        if api.alive():
            kill_9(api)

    restarted = start_api(services.env(), tmp_path / "serve-2.log", port=api.port)
    restarted.headers = headers
    try:
        with restarted.client as client:
            stored = {p: partition_messages(client, topic, p)["messages"] for p in range(3)}
    finally:
        stop(restarted.proc)
    by_offset = {(p, m["offset"]): m for p, messages in stored.items() for m in messages}
    for result, data in acked:
        message = by_offset.get((result["partition"], result["offset"]))
        assert message is not None, f"acknowledged publish lost: {result}"
        assert message["data"] == data
        assert message["messageId"] == result["messageId"]
    batch_items = [m["data"] for ms in stored.values() for m in ms if "batch" in m["data"]]
    assert sorted(d["batch"] for d in batch_items) == list(range(10))


# --- outages of dedicated services -----------------------------------------------------------


@dataclass
class Dedicated:
    """A PostgreSQL and an S3 server of this module alone, safe to stop and start."""

    postgres: EmbeddedPostgres
    s3: EmbeddedS3
    env: dict[str, str]


@pytest.fixture(scope="module")
def dedicated(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dedicated]:
    root = tmp_path_factory.mktemp("dedicated")
    postgres = EmbeddedPostgres(root / "postgres", root / "logs", free_port_block())
    s3 = EmbeddedS3(root / "s3", root / "logs", free_port_block(8), "queuecore-outage")
    started: list[EmbeddedPostgres | EmbeddedS3] = []
    try:
        for service in (postgres, s3):
            service.start()
            started.append(service)
        migrate.apply(postgres.url)
    except Exception as exc:
        for service in started:
            service.stop()
        unavailable(f"dedicated services for outage tests: {exc}")
    env = {
        "QUEUECORE_DATABASE_URL": postgres.url,
        "QUEUECORE_REDIS_URL": services.redis_url,
        "QUEUECORE_OBJECT_STORE_URL": "s3://queuecore-outage",
        "QUEUECORE_S3_ENDPOINT_URL": s3.endpoint_url,
    }
    yield Dedicated(postgres, s3, env)
    s3.stop()
    postgres.stop()


@pytest.fixture
def outage_api(dedicated: Dedicated, tmp_path: Path) -> Iterator[Api]:
    """An API process on the dedicated services, with a fresh organisation's key."""
    org = new_organisation(dedicated.postgres.url, tier="pro")
    api = start_api(dedicated.env, tmp_path / "serve.log")
    api.headers = bearer(org.keys["production"].secret)
    yield api
    stop(api.proc)


def test_an_s3_outage_gives_503_stores_nothing_and_publishing_recovers_without_restart(
    dedicated: Dedicated, outage_api: Api, unique: Callable[[str], str]
) -> None:
    topic = unique("s3-outage")
    with outage_api.client as client:
        create_topic(client, topic, partitions=1)
        before = [publish(client, topic, {"n": n}).json()["offset"] for n in range(3)]
        assert before == [0, 1, 2]
        dedicated.s3.stop()
        try:
            assert_unavailable(publish(client, topic, {"lost": 1}))
            batch = client.post(
                f"/v1/topics/{topic}/messages/batch",
                json={"messages": [{"data": {"lost": 2}}, {"data": {"lost": 3}}]},
            )
            assert_unavailable(batch)
            tail = client.get(f"/v1/topics/{topic}/partitions/0/messages", params={"offset": 3})
            assert tail.status_code == 200, tail.text  # the tail needs no S3 read
            assert tail.json()["latestOffset"] == 3  # no offset was taken by a failed publish
        finally:
            dedicated.s3.start()
    recovered = publish_until_stored(outage_api, topic, {"n": "after"})
    assert outage_api.alive(), "the API process must not have been restarted"
    assert (recovered["partition"], recovered["offset"]) == (0, 3)
    with outage_api.client as client:
        page = partition_messages(client, topic, 0)
    assert [m["data"] for m in page["messages"]] == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": "after"}]


def test_a_postgres_outage_gives_503_stores_nothing_and_publishing_recovers_without_restart(
    dedicated: Dedicated, outage_api: Api, unique: Callable[[str], str]
) -> None:
    topic = unique("pg-outage")
    with outage_api.client as client:
        create_topic(client, topic, partitions=1)
        before = [publish(client, topic, {"n": n}).json()["offset"] for n in range(3)]
        assert before == [0, 1, 2]
        dedicated.postgres.stop()
        try:
            # At once (key and topic still cached: the commit fails; the writer cannot ask the
            # database whether it landed, so the outcome may be reported unknown, never as
            # stored), then after the caches have expired (authentication and the topic lookup
            # need the database too).
            first = publish(client, topic, {"lost": 1})
            assert first.status_code == 503, first.text
            assert first.json()["error"]["code"] in {
                "SERVICE_UNAVAILABLE",
                "PUBLISH_OUTCOME_UNKNOWN",
            }
            time.sleep(2.5)
            assert_unavailable(publish(client, topic, {"lost": 2}))
        finally:
            dedicated.postgres.start()
    recovered = publish_until_stored(outage_api, topic, {"n": "after"})
    assert outage_api.alive(), "the API process must not have been restarted"
    assert (recovered["partition"], recovered["offset"]) == (0, 3)
    with outage_api.client as client:
        page = partition_messages(client, topic, 0)
    assert [m["data"] for m in page["messages"]] == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": "after"}]
