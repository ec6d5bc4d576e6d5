"""Fair groups deliver by deficit round robin across fairness keys (docs/fair-scheduling.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.fairness.conftest import FairTopic, keyed


def test_a_flooding_key_does_not_starve_another(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique)
    fair.publish(keyed("flood", 500) + keyed("quiet", 10))
    member = fair.join()
    first = fair.pull(member, 20)
    assert [m["data"] for m in first if m["fairnessKey"] == "quiet"] == [
        f"quiet-{i}" for i in range(10)
    ], "the quiet key's ten messages are all within the first twenty, in their order"
    assert [m["data"] for m in first if m["fairnessKey"] == "flood"] == [
        f"flood-{i}" for i in range(10)
    ]


def test_an_ordinary_group_on_the_same_topic_delivers_in_offset_order(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique)
    fair.publish(keyed("flood", 50) + keyed("quiet", 10))
    base = f"/v1/topics/{fair.topic}/groups/plain"
    assert client.put(base, json={"startFrom": "earliest"}, headers=fair.headers).status_code == 200
    joined = client.post(f"{base}/members", json={}, headers=fair.headers).json()
    pulled = client.post(
        f"{base}/members/{joined['memberId']}/pull", json={"maxMessages": 20}, headers=fair.headers
    ).json()["messages"]
    assert [m["offset"] for m in pulled] == list(range(20))
    assert {m["fairnessKey"] for m in pulled} == {"flood"}


def test_weights_three_to_one_are_observed(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique, fairness={"weights": {"gold": 3, "basic": 1}})
    fair.publish(keyed("basic", 200) + keyed("gold", 200))
    member = fair.join()
    delivered = []
    while len(delivered) < 200:
        batch = fair.pull(member, 40)
        fair.ack(*[m["ackId"] for m in batch])
        delivered += batch
    counts = Counter(m["fairnessKey"] for m in delivered[:200])
    assert counts == {"gold": 150, "basic": 50}
