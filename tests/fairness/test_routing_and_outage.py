"""A replica that still takes a newly fair group for an ordinary one leases nothing twice; the
throttle buckets fall back to each replica's memory while Redis is unreachable."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
from litestar.testing import TestClient

from core.redis_client import redis_client
from data_plane.config.service import Limit
from data_plane.delivery.throttle import Buckets, Throttle
from tenants.models import NewOrganisation
from tests.fairness.conftest import FairTopic, keyed
from tests.support.services import Services


def test_a_group_made_fair_by_another_replica_is_pulled_fairly_at_once(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    fair = FairTopic(client, org, unique, fairness=None)
    fair.publish(keyed("a", 10) + keyed("b", 10))
    member = fair.join()
    assert [m["offset"] for m in fair.pull(member, 2)] == [0, 1]  # ordinary; the ref is cached
    with psycopg.connect(services.database_url, autocommit=True) as conn:  # another replica's PUT
        conn.execute(
            "INSERT INTO group_fairness (group_id) SELECT g.id FROM consumer_groups g"
            " JOIN topics t ON t.id = g.topic_id WHERE t.name = %s AND g.name = 'workers'",
            (fair.topic,),
        )
    pulled = fair.pull(member, 4)
    assert [m["offset"] for m in pulled] == [2, 10, 3, 11], "fair at once (in order: 2, 3, 4, 5)"
    rest = []
    while batch := fair.pull(member, 7):
        rest += batch
    assert sorted(m["offset"] for m in pulled + rest) == list(range(2, 20))


def test_throttle_buckets_fall_back_to_this_process_while_redis_is_unreachable() -> None:
    async def scenario() -> tuple[list[bool], list[bool]]:
        unreachable = redis_client("redis://127.0.0.1:1/0", timeout_s=0.2)
        buckets = Buckets(unreachable)
        throttle = Throttle(buckets, "env_x", {"api": Limit(rate=1.0, burst=2.0)})
        first = await throttle.admit([("k", ("api",)), ("k", ("api",)), ("k", ("api",))])
        other_key = await throttle.admit([("j", ("api",)), ("j", ()), ("m", ())])
        await unreachable.aclose()
        return first, other_key

    first, other_key = asyncio.run(scenario())
    assert first == [True, True, False], "the burst of 2, then none: limited, not unlimited"
    # j's refusal holds back j's later message (offset order); m's, without a limited key, goes
    assert other_key == [False, False, True]
