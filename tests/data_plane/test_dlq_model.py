"""Random consumer histories with dead letters and replays mixed in, checked step by step.

``maxRetries`` is 1, so a message nacked at its second attempt, or whose second lease ends
with its member, goes to the dead-letter queue. Replays of single messages and of the whole
queue come at random between pulls, acks, nacks and members leaving. What must hold: a dead
letter is never delivered until it is replayed; a replayed one comes back once, at attempt 1,
with its id; the queue holds exactly the messages the consumers gave up on; committed offsets
never move back; and at the end every message published was acked with lag 0 everywhere.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.data_plane.test_delivery_model import PARTITIONS, STEPS, Model
from tests.support.services import Services
from tests.support.tenancy import new_organisation

Where = tuple[int, int]


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


@dataclass
class DeadLetterModel(Model):
    """:class:`Model` with attempts, the dead-letter queue and replays."""

    attempt: dict[str, int] = field(default_factory=dict)  # held id → attempt delivered at
    dead: set[Where] = field(default_factory=set)  # in the queue, not replayed
    doomed: set[Where] = field(default_factory=set)  # second lease ended: dead at next pull
    replayed: set[Where] = field(default_factory=set)  # due again at attempt 1
    ids: dict[Where, str] = field(default_factory=dict)  # message id of each position

    def took(self, member: str, delivered: list[dict[str, Any]]) -> int:
        for message in delivered:
            where = (message["partition"], message["offset"])
            assert where not in self.dead | self.doomed, ("a dead letter was delivered", message)
            if where in self.replayed:
                assert message["attempt"] == 1, message
                assert message["messageId"] == self.ids[where]
                self.replayed.discard(where)
            self.ids[where] = message["messageId"]
            self.attempt[message["ackId"]] = message["attempt"]
        return super().took(member, delivered)

    def nack(self) -> None:
        if not self.held:
            return
        ack_id = self.rng.choice(sorted(self.held))
        response = self.group.nack(ack_id, error=f"failed {ack_id}")
        assert response.status_code == 200, response.text
        partition, offset, _ = self.held.pop(ack_id)
        gives_up = self.attempt[ack_id] >= 2
        assert response.json()["deadLettered"] is gives_up, (ack_id, response.json())
        if gives_up:
            self.dead.add((partition, offset))
        self.stale.add(ack_id)

    def replace(self, leaving: str) -> None:
        second = {
            (p, o) for a, (p, o, m) in self.held.items() if m == leaving and self.attempt[a] >= 2
        }
        super().replace(leaving)
        self.doomed |= second

    def inspect(self) -> None:
        """The queue holds exactly what was given up on (a doomed lease may not be there yet)."""
        listed = self._queue()
        assert self.dead <= listed <= self.dead | self.doomed, (listed, self.dead, self.doomed)
        self.doomed -= listed
        self.dead |= listed

    def _queue(self) -> set[Where]:
        entries: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 7} | ({"after": after} if after else {})
            page = self.group.client.get(
                f"{self.group.base}/dlq", params=params, headers=self.group.headers
            ).json()
            entries += page["messages"]
            after = page["nextAfter"]
            if after is None:
                assert page["depth"] == len(entries)
                return {(m["partition"], m["offset"]) for m in entries}

    def replay(self) -> None:
        self.inspect()
        if not self.dead:
            return
        if self.rng.random() < 0.3:
            response = self.group.client.post(
                f"{self.group.base}/dlq/replay", headers=self.group.headers
            )
            assert response.json() == {"replayed": len(self.dead)}, response.text
            chosen = set(self.dead)
        else:
            where = self.rng.choice(sorted(self.dead))
            response = self.group.client.post(
                f"{self.group.base}/dlq/{self.ids[where]}/replay", headers=self.group.headers
            )
            assert response.json() == {"replayed": 1}, response.text
            chosen = {where}
        self.dead -= chosen
        self.replayed |= chosen


def drain(model: DeadLetterModel) -> None:
    """Pull and ack, replaying the queue whenever it quiets down, until nothing is left."""
    quiet = 0
    while quiet < 2:
        got = sum(model.pull(member) for member in model.members)
        ids = sorted(model.held)
        if ids:
            assert model.group.ack(*ids).json()["acked"] == ids
            for ack_id in ids:
                partition, offset, _ = model.held.pop(ack_id)
                model.done.add((partition, offset))
        if not got:
            model.inspect()
            if model.dead:
                model.replay()
                continue
        quiet = 0 if got else quiet + 1


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_histories_with_dead_letters_and_replays(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], seed: int
) -> None:
    group = Group(
        client,
        org,
        unique,
        partitions=PARTITIONS,
        ackTimeout="10m",
        deadLetter={"maxRetries": 1, "retryDelay": "0ms"},
    )
    model = DeadLetterModel(group, random.Random(seed), [group.join(), group.join()], True)
    actions: list[tuple[int, Callable[[], Any]]] = [
        (3, model.publish),
        (5, lambda: model.pull(model.rng.choice(model.members))),
        (3, model.ack),
        (3, model.nack),
        (1, model.replace_member),
        (2, model.replay),
        (1, model.inspect),
        (1, model.check_offsets),
    ]
    weights = [w for w, _ in actions]
    for _ in range(STEPS):
        model.rng.choices([a for _, a in actions], weights)[0]()

    drain(model)

    assert model.done == model.published
    assert model.dead == model.doomed == model.replayed == set()
    model.check_offsets()
    for partition in range(PARTITIONS):
        assert group.offsets(partition)["lag"] == 0
    described = client.get(group.base, headers=group.headers).json()
    assert described["deadLetters"] == 0
