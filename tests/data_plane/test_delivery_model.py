"""Random sequences of pulls, acks (repeated and stale ones too), nacks, extends and members
leaving, checked step by step against what each delivery mode promises its consumers: on an
exactly-once topic an ack of a lease that ended is refused; on an at-least-once topic it is
accepted until the message is delivered again."""

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
    exactly_once: bool
    published: set[tuple[int, int]] = field(default_factory=set)
    held: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # id → (p, o, member)
    acked: set[str] = field(default_factory=set)
    stale: set[str] = field(default_factory=set)
    left: dict[str, tuple[int, int]] = field(default_factory=dict)  # held by a member that left
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
        return self.took(member, self.group.pull(member, max_messages=self.rng.randint(1, 8)))

    def took(self, member: str, delivered: list[dict[str, Any]]) -> int:
        """Check and note a pull's deliveries; how many."""
        for message in delivered:
            where = (message["partition"], message["offset"])
            # A message whose ack succeeded is never delivered again.
            assert where not in self.done, (where, message)
            fresh = message["ackId"]
            assert all(
                fresh not in known for known in (self.held, self.acked, self.stale, self.left)
            )
            self.held[message["ackId"]] = (*where, member)
            for ack_id in [a for a, at in self.left.items() if at == where]:
                del self.left[ack_id]
                self.stale.add(ack_id)  # its message was delivered again: superseded
        return len(delivered)

    def ack(self) -> None:
        current = self.rng.sample(sorted(self.held), min(len(self.held), self.rng.randint(0, 6)))
        again = self.rng.sample(sorted(self.acked), min(len(self.acked), self.rng.randint(0, 2)))
        stale = self.rng.sample(sorted(self.stale), min(len(self.stale), self.rng.randint(0, 2)))
        late = self.rng.sample(sorted(self.left), min(len(self.left), self.rng.randint(0, 2)))
        ids = current + again + stale + late
        if not ids:
            return
        response = self.group.ack(*ids)
        body = response.json()
        # Current and repeated acks succeed, and on at-least-once a late one (its lease ended,
        # the message not delivered again); any other ack of a lease that ended is refused.
        accepted = current + again + ([] if self.exactly_once else late)
        assert sorted(body["acked"]) == sorted(accepted), body
        assert sorted(r["ackId"] for r in body["rejected"]) == sorted(set(ids) - set(accepted))
        assert response.status_code == (200 if accepted else 409), body
        for ack_id in current:
            partition, offset, _ = self.held.pop(ack_id)
            self.acked.add(ack_id)
            self.done.add((partition, offset))
        if not self.exactly_once:
            for ack_id in late:
                self.done.add(self.left.pop(ack_id))
                self.acked.add(ack_id)

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
        self.replace(self.rng.choice(self.members))

    def replace(self, leaving: str) -> None:
        """``leaving`` leaves the group and a new member joins."""
        response = self.group.client.delete(
            f"{self.group.base}/members/{leaving}", headers=self.group.headers
        )
        assert response.status_code == 204, response.text
        for ack_id in [a for a, (_, _, m) in self.held.items() if m == leaving]:
            partition, offset, _ = self.held.pop(ack_id)
            self.left[ack_id] = (partition, offset)  # its leases ended with it
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


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_consumer_histories_keep_the_promises_of_the_delivery_mode(
    client: TestClient,
    org: NewOrganisation,
    unique: Callable[[str], str],
    seed: int,
    delivery: str,
) -> None:
    group = Group(
        client,
        org,
        unique,
        partitions=PARTITIONS,
        delivery=delivery,
        ackTimeout="10m",
        deadLetter={"maxRetries": 100, "retryDelay": "0ms"},
    )
    model = Model(
        group, random.Random(seed), [group.join(), group.join()], delivery == "exactly-once"
    )
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
