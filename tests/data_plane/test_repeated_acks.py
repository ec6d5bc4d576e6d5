"""An ack sent again — say after its response was lost — is answered "acked" for the ten
minutes a tombstone of the forgotten lease is kept, while a stale ack stays refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from litestar.testing import TestClient

from core.db import connect
from data_plane import tasks
from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.data_plane.test_pulls import publish_keyed
from tests.support.services import Services
from tests.support.tenancy import new_organisation


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def tombstones(database_url: str, topic: str) -> int:
    """How many ack tombstones ``topic``'s groups have."""
    with connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM settled_acks s JOIN consumer_groups g ON g.id = s.group_id"
            " JOIN topics t ON t.id = g.topic_id WHERE t.name = %s",
            (topic,),
        ).fetchone()
    assert row is not None
    return int(row["n"])


def test_range_acks_sent_again_after_their_offsets_were_committed_are_answered_acked(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique, partitions=2)  # exactly-once
    publish_keyed(group)
    member = group.join()
    ack_ids = [d["ackId"] for d in group.pull(member)]
    first = group.ack(*ack_ids)
    assert first.status_code == 200 and first.json()["rejected"] == []
    assert group.offsets(0)["lag"] == group.offsets(1)["lag"] == 0
    assert tombstones(services.database_url, group.topic) == 2  # one per forgotten range

    again = group.ack(*ack_ids)  # the first response was lost; the client retries

    assert again.status_code == 200, again.text
    assert sorted(again.json()["acked"]) == sorted(ack_ids)
    assert again.json()["rejected"] == []
    # A retry that also carries new ids acks those too.
    publish_keyed(group)
    fresh = [d["ackId"] for d in group.pull(member)]
    mixed = group.ack(*ack_ids[:3], *fresh)
    assert mixed.status_code == 200, mixed.text
    assert sorted(mixed.json()["acked"]) == sorted(ack_ids[:3] + fresh)
    assert group.offsets(0)["lag"] == group.offsets(1)["lag"] == 0
    assert group.pull(member, wait_ms=200) == []  # nothing acked comes back


def test_a_redelivery_acked_twice_is_acked_and_its_nack_refused(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(client, org, unique)
    group.publish({"job": 1})
    member = group.join()
    first = group.pull(member)[0]
    retried = client.post(
        f"{group.base}/nack",
        json={"ackId": first["ackId"], "error": "flaky", "retryDelay": "0ms"},
        headers=group.headers,
    )
    assert retried.status_code == 200, retried.text
    redelivered = group.pull(member, wait_ms=5000)
    assert [m["attempt"] for m in redelivered] == [2]
    ack_id = redelivered[0]["ackId"]
    assert group.ack(ack_id).status_code == 200
    assert group.offsets()["lag"] == 0

    again = group.ack(ack_id)

    assert again.status_code == 200, again.text
    assert again.json() == {"acked": [ack_id], "rejected": []}
    late_nack = group.nack(ack_id)
    assert late_nack.status_code == 409
    assert late_nack.json()["error"]["code"] == "ACK_REJECTED"
    assert "already acked" in late_nack.json()["error"]["message"]
    # The first delivery's id never was acked: it stays refused.
    stale = group.ack(first["ackId"])
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "ACK_REJECTED"


def test_tombstones_are_purged_after_the_grace_and_younger_ones_kept(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    old, young = (Group(client, org, unique) for _ in range(2))
    acked: dict[str, list[str]] = {}
    for group in (old, young):
        group.publish({"job": 1}, {"job": 2})
        acked[group.topic] = [d["ackId"] for d in group.pull(group.join())]
        assert group.ack(*acked[group.topic]).status_code == 200
    with connect(services.database_url) as conn:  # old's ack was settled an hour ago
        conn.execute(
            "UPDATE settled_acks SET settled_at = now() - interval '1 hour' WHERE group_id ="
            " (SELECT g.id FROM consumer_groups g JOIN topics t ON t.id = g.topic_id"
            "  WHERE t.name = %s)",
            (old.topic,),
        )

    report = tasks.purge_settled_acks()

    assert report["settledAcksPurged"] >= 1
    assert tombstones(services.database_url, old.topic) == 0
    assert tombstones(services.database_url, young.topic) == 1
    assert young.ack(*acked[young.topic]).status_code == 200
    # Past the grace an ack of the purged range is unknown, as any id that never existed.
    late = old.ack(*acked[old.topic])
    assert late.status_code == 409 and late.json()["error"]["code"] == "ACK_REJECTED"
