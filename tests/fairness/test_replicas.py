"""Fair groups across replicas and restarts: throttle buckets shared by two API replicas, and a
round that survives every process being killed in the middle of it.

One private cluster (PostgreSQL, SeaweedFS, Redis and two ``queuecore serve`` replicas) for the
module: the tests kill its processes, never the session's shared services.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.cluster import Cluster, signal_tree
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation


@pytest.fixture(scope="module")
def cluster(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster.start(tmp_path_factory.mktemp("fair-cluster"))
    yield started
    started.stop()


class Api:
    """One replica, as a consumer sees it."""

    def __init__(self, url: str, headers: dict[str, str], base: str) -> None:
        self.http = httpx.Client(base_url=url, headers=headers, timeout=30)
        self.base = base

    def join(self) -> str:
        response = self.http.post(f"{self.base}/members", json={"sessionTimeout": "60s"})
        assert response.status_code == 201, response.text
        return str(response.json()["memberId"])

    def pull(self, member: str, count: int, wait_ms: int = 0) -> list[dict[str, Any]]:
        response = self.http.post(
            f"{self.base}/members/{member}/pull", json={"maxMessages": count, "waitMs": wait_ms}
        )
        assert response.status_code == 200, response.text
        return list(response.json()["messages"])

    def ack(self, batch: list[dict[str, Any]]) -> None:
        if batch:
            response = self.http.post(
                f"{self.base}/ack", json={"ackIds": [m["ackId"] for m in batch]}
            )
            assert response.status_code == 200, response.text


def _set_up(cluster: Cluster, name: str, partitions: int, **group: Any) -> tuple[Api, Api, Any]:
    org = new_organisation(cluster.postgres.url, tier="pro")
    headers = bearer(org.keys["production"].secret)
    base = f"/v1/topics/{name}/groups/workers"
    first = Api(cluster.apis[0].url, headers, base)
    created = first.http.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert created.status_code == 201, created.text
    configured = first.http.put(base, json={"startFrom": "earliest", "fairness": {}, **group})
    assert configured.status_code == 200, configured.text
    return first, Api(cluster.apis[1].url, headers, base), org


def test_a_throttle_key_holds_its_rate_across_two_replicas(cluster: Cluster) -> None:
    first, second, _ = _set_up(cluster, "throttled", partitions=2)
    assert first.http.put("/v1/config/throttle.shared.rate", json={"value": "5"}).status_code == 200
    messages = [
        {"data": i, "key": f"k{i}", "fairnessKey": f"tenant-{i % 3}", "throttleKeys": ["shared"]}
        for i in range(200)
    ]
    published = first.http.post("/v1/topics/throttled/messages/batch", json={"messages": messages})
    assert published.status_code == 201, published.text
    assert {r["partition"] for r in published.json()["results"]} == {0, 1}
    members = [(first, first.join()), (second, second.join())]  # one partition each
    counts = [0, 0]
    started = time.monotonic()

    def consume(index: int) -> None:  # each replica's consumer pulls as fast as it is served
        api, member = members[index]
        while time.monotonic() - started < 3.0:
            batch = api.pull(member, 50, wait_ms=300)
            counts[index] += len(batch)
            api.ack(batch)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    total = sum(counts)
    # A bucket of 5 tokens refilling at 5 a second, shared: at most 5 + 5 * elapsed in all.
    assert total <= 5 + 5 * elapsed + 1, (counts, elapsed)
    assert total >= 5 * elapsed - 2, (counts, elapsed)
    assert all(counts), f"both replicas delivered: {counts}"
    stats = first.http.get("/v1/topics/throttled/groups/workers/stats").json()
    [bucket] = stats["perThrottle"]
    assert (bucket["key"], bucket["ratePerSecond"], bucket["burst"]) == ("shared", 5.0, 5.0)
    assert 0 <= bucket["tokens"] <= 5


def _kill_everything(cluster: Cluster) -> None:
    for target in [
        *cluster.apis,
        *[t for kind in ("postgres", "redis", "s3") for t in cluster.targets()[kind]],
    ]:
        root = target.root()
        if root is not None:
            signal_tree(root, signal.SIGKILL)
            root.wait(30)


def _start_everything(cluster: Cluster) -> None:
    for kind in ("postgres", "s3", "redis"):
        for target in cluster.targets()[kind]:
            target.restart()
    for api in cluster.apis:
        api.start()


def test_a_round_survives_every_process_killed_in_its_middle(
    cluster: Cluster, tmp_path: Path
) -> None:
    first, second, _ = _set_up(
        cluster,
        "restarted",
        partitions=1,
        fairness={"weights": {"gold": 3, "basic": 1}},
        ackTimeout="10m",  # the lease of the message in hand outlives the restart, however slow
    )
    messages = [{"data": f"basic-{i}", "fairnessKey": "basic"} for i in range(20)]
    messages += [{"data": f"gold-{i}", "fairnessKey": "gold"} for i in range(60)]
    assert (
        first.http.post(
            "/v1/topics/restarted/messages/batch", json={"messages": messages}
        ).status_code
        == 201
    )
    member = first.join()
    before = first.pull(member, 2)
    assert [m["fairnessKey"] for m in before] == ["basic", "gold"]  # basic's turn, then gold's
    first.ack(before)
    mid = first.pull(member, 1)  # gold is in the middle of its turn of 3
    _kill_everything(cluster)
    _start_everything(cluster)
    after = second.pull(member, 6, wait_ms=0)
    assert [m["fairnessKey"] for m in after] == ["gold", "basic", "gold", "gold", "gold", "basic"]
    assert all(m["attempt"] == 1 for m in after), "nothing redelivered: the round went on"
    delivered = before + mid + after
    second.ack(mid + after)
    while batch := second.pull(member, 25):
        second.ack(batch)
        delivered += batch
    assert sorted(m["offset"] for m in delivered) == list(range(80)), "each message once"
    offsets = second.http.get("/v1/topics/restarted/groups/workers/offsets").json()["partitions"]
    assert (offsets[0]["current"], offsets[0]["lag"]) == (80, 0)
