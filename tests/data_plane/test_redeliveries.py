"""Redeliveries in bulk: a member that leaves with many messages in flight hands them to the
next owner in a few statements, not in a few per message, so recovery keeps pace."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from litestar.testing import TestClient

from core.db import connect
from data_plane.delivery import queries as q
from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.data_plane.test_pulls import pull_directly
from tests.support.services import Services
from tests.support.tenancy import new_organisation

IN_FLIGHT = 100


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def left_with_in_flight(group: Group, pull_size: int) -> list[str]:
    """A member pulls all IN_FLIGHT published messages, ``pull_size`` at a time, and leaves
    (its leases end with it); the ack ids it held."""
    group.publish(*({"n": i} for i in range(IN_FLIGHT)))
    leaving = group.join()
    held = []
    for _ in range(IN_FLIGHT // pull_size):
        pulled = group.pull(leaving, max_messages=pull_size)
        assert len(pulled) == pull_size
        held += [m["ackId"] for m in pulled]
    gone = group.client.delete(f"{group.base}/members/{leaving}", headers=group.headers)
    assert gone.status_code == 204
    return held


def test_a_pull_of_many_redeliveries_takes_a_few_statements_not_some_per_message(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique)
    held = left_with_in_flight(group, IN_FLIGHT)

    pulled, statements, _ = pull_directly(services.database_url, group, group.join(), None)

    got = [(d.offset, d.attempt, d.message.value) for d in pulled.deliveries]
    assert got == [(i, 2, b'{"n":%d}' % i) for i in range(IN_FLIGHT)]
    new_ids = {d.ack_id for d in pulled.deliveries}
    assert len(new_ids) == IN_FLIGHT and not new_ids & set(held)
    assert [s for s, _ in statements].count(q.LEASE_AGAIN_MANY) == 1
    # It was 307: three per message.
    assert len(statements) < 20, [s.split()[:3] for s, _ in statements]
    acked = group.ack(*new_ids)
    assert acked.status_code == 200 and acked.json()["rejected"] == []
    assert group.offsets()["lag"] == 0


def test_a_member_that_held_many_small_leases_is_redelivered_in_a_few_statements(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique)
    left_with_in_flight(group, 4)  # 25 range leases of 4 messages

    pulled, statements, _ = pull_directly(services.database_url, group, group.join(), None)

    assert [(d.offset, d.attempt) for d in pulled.deliveries] == [(i, 2) for i in range(IN_FLIGHT)]
    # Two statements hand all 25 ranges over, not two for each.
    assert [s for s, _ in statements].count(q.INSERT_SPLIT_DELIVERIES) == 1
    assert len(statements) < 20, [s.split()[:3] for s, _ in statements]
    acked = group.ack(*(d.ack_id for d in pulled.deliveries))
    assert acked.status_code == 200 and acked.json()["rejected"] == []
    assert group.offsets()["lag"] == 0


def test_expired_leases_past_max_retries_are_dead_lettered_together(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique, deadLetter={"maxRetries": 0})
    held = left_with_in_flight(group, IN_FLIGHT)

    pulled, statements, _ = pull_directly(services.database_url, group, group.join(), None)

    assert pulled.deliveries == []  # attempt 1 was the last one allowed
    assert [s for s, _ in statements].count(q.INSERT_DEAD_LETTERS) == 1
    assert len(statements) < 20, [s.split()[:3] for s, _ in statements]  # it was 209
    assert group.offsets()["lag"] == 0
    with connect(services.database_url) as conn:
        letters = conn.execute(
            'SELECT d."offset", d.value, d.error, d.attempts FROM dead_letters d'
            " JOIN consumer_groups g ON g.id = d.group_id JOIN topics t ON t.id = g.topic_id"
            ' WHERE t.name = %s ORDER BY d."offset"',
            (group.topic,),
        ).fetchall()
    assert [(r["offset"], bytes(r["value"]), r["error"], r["attempts"]) for r in letters] == [
        (i, b'{"n":%d}' % i, "ack timeout expired", 1) for i in range(IN_FLIGHT)
    ]
    refused = group.ack(held[0])
    assert refused.status_code == 409  # a dead letter's old lease cannot be acked
