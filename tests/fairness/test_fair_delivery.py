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


def test_both_delivery_kinds_are_fair(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    for delivery in ("exactly-once", "at-least-once"):
        fair = FairTopic(client, org, unique, delivery=delivery)
        fair.publish(keyed("a", 30) + keyed("b", 30) + keyed("c", 3))
        member = fair.join()
        first = fair.pull(member, 9)
        assert [m["fairnessKey"] for m in first] == ["a", "b", "c"] * 3, delivery
        fair.ack(*[m["ackId"] for m in first])


def test_offset_order_is_kept_within_each_key(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique, partitions=2)
    messages = [m for i in range(40) for m in keyed(f"k{i % 4}", 1, start=i)]
    fair.publish([{**m, "key": m["fairnessKey"]} for m in messages])
    member = fair.join()
    delivered = []
    while batch := fair.pull(member, 7):
        fair.ack(*[m["ackId"] for m in batch])
        delivered += batch
    assert len(delivered) == 40
    for key in ("k0", "k1", "k2", "k3"):
        numbers = [int(m["data"].split("-")[1]) for m in delivered if m["fairnessKey"] == key]
        assert numbers == sorted(numbers) and len(numbers) == 10


def test_committed_offset_and_lag_under_out_of_order_acks(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique)
    fair.publish(keyed("a", 10) + keyed("b", 10))  # a: offsets 0-9, b: 10-19
    member = fair.join()
    first = fair.pull(member, 6)  # a0 b10 a1 b11 a2 b12
    assert [m["offset"] for m in first] == [0, 10, 1, 11, 2, 12]
    fair.ack(*[m["ackId"] for m in first if m["fairnessKey"] == "b"])
    [partition] = fair.offsets()
    assert (partition["current"], partition["lag"]) == (0, 20), "b's acks are above offset 0"
    fair.ack(*[m["ackId"] for m in first if m["fairnessKey"] == "a"])
    [partition] = fair.offsets()
    assert (partition["current"], partition["lag"]) == (3, 17), "offset 3 is the lowest not done"
    rest = []
    while batch := fair.pull(member, 5):
        rest += batch
        fair.ack(*[m["ackId"] for m in batch])
    assert sorted(m["offset"] for m in first + rest) == list(range(20)), "each once"
    [partition] = fair.offsets()
    assert (partition["current"], partition["lag"]) == (20, 0)


def test_turning_fairness_off_goes_back_to_offset_order_without_repeating_a_message(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique)
    fair.publish(keyed("a", 10) + keyed("b", 10))
    member = fair.join()
    first = fair.pull(member, 4)  # a0 b10 a1 b11
    response = client.put(
        fair.base, json={"startFrom": "earliest", "fairness": None}, headers=fair.headers
    )
    assert response.status_code == 200 and "fairness" not in response.json()["config"]
    rest = []
    while batch := fair.pull(member, 3):
        rest += batch
    assert [m["offset"] for m in rest] == [2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17, 18, 19]
    assert sorted(m["offset"] for m in first + rest) == list(range(20))
    fair.ack(*[m["ackId"] for m in first + rest])
    described = client.get(fair.base, headers=fair.headers).json()
    assert described["partitions"][0]["offset"] == 20


def test_fairness_config_is_validated_and_shown(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    fair = FairTopic(client, org, unique, fairness={"weights": {"vip": 5}, "quantum": 2})
    assert fair.view["config"]["fairness"] == {
        "weights": {"vip": 5},
        "defaultWeight": 1,
        "quantum": 2,
    }
    kept = client.put(fair.base, json={"startFrom": "earliest"}, headers=fair.headers).json()
    assert kept["config"]["fairness"]["quantum"] == 2, "a PUT without fairness keeps it"
    for bad in (
        {"weights": {"vip": 0}},
        {"quantum": 1001},
        {"defaultWeight": "x"},
        {"lookAhead": 5},
    ):
        response = client.put(fair.base, json={"fairness": bad}, headers=fair.headers)
        assert response.status_code in (400, 422), bad
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"
