"""Random sequences of pulls, acks (repeated and stale ones too), nacks, extends and members
leaving, checked step by step against what an exactly-once topic promises its consumers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.support.services import Services
from tests.support.tenancy import new_organisation

PARTITIONS = 3
STEPS = 120


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


@dataclass
class Model:
    """What the consumers know: ids they hold, ids acked, ids whose lease is over."""

    group: Group
    rng: random.Random
    members: list[str]
    published: set[tuple[int, int]] = field(default_factory=set)
    held: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # id → (p, o, member)
    acked: set[str] = field(default_factory=set)
    stale: set[str] = field(default_factory=set)
    done: set[tuple[int, int]] = field(default_factory=set)
    committed: dict[int, int] = field(default_factory=dict)

    def publish(self) -> None:
        keys = [f"k{self.rng.randrange(40)}" for _ in range(self.rng.randint(1, 6))]
        response = self.group.client.post(
            f"/v1/topics/{self.group.topic}/messages/batch",
            json={"messages": [{"data": k, "key": k} for k in keys]},
            headers=self.group.headers,
        )
        assert response.status_code == 201, response.text
        self.published |= {(r["partition"], r["offset"]) for r in response.json()["results"]}

    def pull(self, member: str) -> int:
        delivered = self.group.pull(member, max_messages=self.rng.randint(1, 8))
        for message in delivered:
            where = (message["partition"], message["offset"])
            # A message whose ack succeeded is never delivered again.
            assert where not in self.done, (where, message)
            fresh = message["ackId"]
            assert fresh not in self.held and fresh not in self.acked and fresh not in self.stale
            self.held[message["ackId"]] = (*where, member)
        return len(delivered)

    def ack(self) -> None:
        current = self.rng.sample(sorted(self.held), min(len(self.held), self.rng.randint(0, 6)))
        again = self.rng.sample(sorted(self.acked), min(len(self.acked), self.rng.randint(0, 2)))
        stale = self.rng.sample(sorted(self.stale), min(len(self.stale), self.rng.randint(0, 2)))
        ids = current + again + stale
        if not ids:
            return
        response = self.group.ack(*ids)
        body = response.json()
        # Current and repeated acks succeed; an ack of a lease that ended is refused.
        assert sorted(body["acked"]) == sorted(current + again), body
        assert sorted(r["ackId"] for r in body["rejected"]) == sorted(stale), body
        assert response.status_code == (200 if current or again else 409), body
        for ack_id in current:
            partition, offset, _ = self.held.pop(ack_id)
            self.acked.add(ack_id)
            self.done.add((partition, offset))

    def nack(self) -> None:
        if not self.held:
            return
        ack_id = self.rng.choice(sorted(self.held))
        response = self.group.client.post(
            f"{self.group.base}/nack",
            json={"ackId": ack_id, "error": "flaky", "retryDelay": "0ms"},
            headers=self.group.headers,
        )
        assert response.status_code == 200, response.text
        assert response.json()["deadLettered"] is False
        self.held.pop(ack_id)
        self.stale.add(ack_id)

    def extend(self) -> None:
        ids = self.rng.sample(sorted(self.held), min(len(self.held), self.rng.randint(1, 4)))
        if not ids:
            return
        response = self.group.client.post(
            f"{self.group.base}/extend",
            json={"ackIds": ids, "seconds": 600},
            headers=self.group.headers,
        )
        assert response.status_code == 200, response.text
        assert sorted(response.json()["extended"]) == sorted(ids)

    def replace_member(self) -> None:
        leaving = self.rng.choice(self.members)
        response = self.group.client.delete(
            f"{self.group.base}/members/{leaving}", headers=self.group.headers
        )
        assert response.status_code == 204, response.text
        for ack_id in [a for a, (_, _, m) in self.held.items() if m == leaving]:
            self.held.pop(ack_id)
            self.stale.add(ack_id)  # its leases ended with it: redelivered, refused if acked
        self.members[self.members.index(leaving)] = self.group.join()

    def check_offsets(self) -> None:
        for partition in range(PARTITIONS):
            current = self.group.offsets(partition)["current"]
            # Committed offsets never move backwards.
            assert current >= self.committed.get(partition, 0), (partition, current)
            self.committed[partition] = current


def drain(model: Model) -> None:
    """Pull and ack until nothing comes for two rounds."""
    quiet = 0
    while quiet < 2:
        got = sum(model.pull(member) for member in model.members)
        if model.held:
            ids = sorted(model.held)
            assert model.group.ack(*ids).json()["acked"] == ids
            for ack_id in ids:
                partition, offset, _ = model.held.pop(ack_id)
                model.done.add((partition, offset))
        quiet = 0 if got else quiet + 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_consumer_histories_keep_the_exactly_once_promises(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], seed: int
) -> None:
    group = Group(
        client,
        org,
        unique,
        partitions=PARTITIONS,
        ackTimeout="10m",
        deadLetter={"maxRetries": 100, "retryDelay": "0ms"},
    )
    model = Model(group, random.Random(seed), [group.join(), group.join()])
    actions: list[tuple[int, Callable[[], Any]]] = [
        (3, model.publish),
        (5, lambda: model.pull(model.rng.choice(model.members))),
        (4, model.ack),
        (1, model.nack),
        (1, model.extend),
        (1, model.replace_member),
        (1, model.check_offsets),
    ]
    weights = [w for w, _ in actions]
    for _ in range(STEPS):
        model.rng.choices([a for _, a in actions], weights)[0]()

    drain(model)

    # Every message published was acked, once: nothing lost, nothing left in flight.
    assert model.done == model.published
    model.check_offsets()
    for partition in range(PARTITIONS):
        assert group.offsets(partition)["lag"] == 0
    repeated = sorted(model.acked)[:50]
    assert group.ack(*repeated).json() == {"acked": repeated, "rejected": []}
