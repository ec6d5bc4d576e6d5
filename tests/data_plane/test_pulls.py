"""A pull in one round trip: one statement in autocommit mode when no redelivery is due; the
leases it committed are expired at once when their messages cannot be read, so nothing is lost
or held until the ack timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row

from data_plane import delivery
from data_plane.delivery import queries as q
from data_plane.faults import FaultyObjectStore
from data_plane.read.cache import BlockCache
from data_plane.read.reader import SegmentReader
from data_plane.write.segment import Message
from tenants.models import NewOrganisation
from tests.data_plane.stored import object_store
from tests.data_plane.test_consume_api import Group
from tests.support.runtime import data_plane_of
from tests.support.services import Services
from tests.support.tenancy import new_organisation

KEYS = [f"k{i}" for i in range(12)]  # these keys hash to both partitions of a two-partition topic


class CountingConnection(psycopg.AsyncConnection[DictRow]):
    """Records every statement sent with ``execute``, and whether autocommit was on for it."""

    statements: list[tuple[str, bool]]

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        self.statements.append((str(query), self.autocommit))
        return await super().execute(query, params, **kwargs)


class ShortReader(SegmentReader):
    """Returns one message fewer than a pull's block read asks for, the first ``times`` times."""

    def __init__(self, times: int = 1) -> None:
        super().__init__(object_store(), BlockCache())
        self.times = times

    async def read_blocks(
        self, conn: Any, topic_id: str, partition: int, blocks: Any, start: int, end: int
    ) -> list[Message]:
        messages = await super().read_blocks(conn, topic_id, partition, blocks, start, end)
        if self.times > 0:
            self.times -= 1
            return messages[:-1]
        return messages


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


@pytest.fixture
def own_app(services: Services) -> Iterator[TestClient]:
    """An API of its own, so the reader swapped into it touches no other test."""
    from control_plane.app import create_app

    with TestClient(app=create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


def publish_keyed(group: Group) -> set[tuple[int, int]]:
    """One message per key; the (partition, offset) of each, on both partitions."""
    response = group.client.post(
        f"/v1/topics/{group.topic}/messages/batch",
        json={"messages": [{"data": key, "key": key} for key in KEYS]},
        headers=group.headers,
    )
    assert response.status_code == 201, response.text
    published = {(r["partition"], r["offset"]) for r in response.json()["results"]}
    assert {partition for partition, _ in published} == {0, 1}
    return published


Outcome = tuple[delivery.Pulled, list[tuple[str, bool]], tuple[bool, TransactionStatus]]


async def lookup_ref(conn: CountingConnection, group: Group) -> delivery.GroupRef:
    """The delivery ref of ``group``'s group ``workers``, looked up as the API does."""
    env = await (
        await conn.execute("SELECT environment_id FROM topics WHERE name = %s", (group.topic,))
    ).fetchone()
    assert env is not None
    return await delivery.group_ref(conn, env["environment_id"], group.topic, "workers")


def pull_directly(database_url: str, group: Group, member: str, owned: int | None) -> Outcome:
    """``delivery.pull`` on a connection that counts its statements (the lookup not counted);
    also the connection's autocommit and transaction status afterwards."""

    async def run() -> Outcome:
        async with await CountingConnection.connect(database_url, row_factory=dict_row) as conn:
            conn.statements = []
            ref = await lookup_ref(conn, group)
            await conn.commit()
            conn.statements = []
            reader = SegmentReader(object_store())
            pulled = await delivery.pull(conn, reader, ref, member, 100, owned)
            return pulled, conn.statements, (conn.autocommit, conn.info.transaction_status)

    return asyncio.run(run())


def assert_in_offset_order(messages: list[dict[str, Any]]) -> None:
    for partition in {m["partition"] for m in messages}:
        offsets = [m["offset"] for m in messages if m["partition"] == partition]
        assert offsets == sorted(offsets), f"partition {partition} out of order: {offsets}"


def test_a_pull_with_no_redelivery_due_is_one_statement_in_autocommit(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique, partitions=2)
    published = publish_keyed(group)
    member = group.join()
    pulled, statements, after = pull_directly(services.database_url, group, member, None)
    assert statements == [(q.PULL, True)], "one statement, no BEGIN and no COMMIT round trips"
    assert after == (False, TransactionStatus.IDLE), "committed, the pool's mode back"
    assert [(d.partition, d.offset) for d in pulled.deliveries] == sorted(published)
    assert {d.attempt for d in pulled.deliveries} == {1}
    assert pulled.partitions == {0, 1}
    acked = group.ack(*(d.ack_id for d in pulled.deliveries))
    assert acked.status_code == 200 and len(acked.json()["acked"]) == len(published)
    assert group.offsets(0)["lag"] == group.offsets(1)["lag"] == 0


def test_a_member_with_more_partitions_than_lease_ids_gets_the_rest_in_a_second_statement(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique, partitions=2)
    published = publish_keyed(group)
    member = group.join()
    # As after a rebalance that gave the member partitions since its previous pull.
    pulled, statements, _ = pull_directly(services.database_url, group, member, owned=1)
    assert statements == [(q.PULL, True), (q.PULL, True)]
    assert [(d.partition, d.offset) for d in pulled.deliveries] == sorted(published)
    assert {d.attempt for d in pulled.deliveries} == {1}


def test_a_pull_whose_read_fails_is_an_error_and_its_messages_come_back_at_once(
    own_app: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    # An ack timeout far longer than the test: the messages come back only if the failed pull's
    # leases were ended at once.
    group = Group(own_app, org, unique, partitions=2, ackTimeout="10m")
    published = publish_keyed(group)
    member = group.join()
    store = FaultyObjectStore(data_plane_of(own_app.app).objects)
    # A reader with an empty cache, not fed by the writer: the pull's blocks are fetched.
    data_plane_of(own_app.app).reader = SegmentReader(store, BlockCache())
    store.fail_always("get")
    failed = own_app.post(
        f"{group.base}/members/{member}/pull", json={"maxMessages": 100}, headers=group.headers
    )
    assert failed.status_code == 503, failed.text
    assert failed.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert store.failures["get"] >= 1
    store.heal()
    again = group.pull(member)
    assert sorted((m["partition"], m["offset"]) for m in again) == sorted(published)
    assert {m["attempt"] for m in again} == {2}, "a redelivery after an expiry"
    assert_in_offset_order(again)
    assert group.ack(*(m["ackId"] for m in again)).status_code == 200
    assert group.offsets(0)["lag"] == group.offsets(1)["lag"] == 0
    assert group.pull(member) == []


def test_a_short_read_delivers_the_other_leases_and_its_own_offsets_come_back_at_once(
    own_app: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    group = Group(own_app, org, unique, partitions=2, ackTimeout="10m")
    published = publish_keyed(group)
    member = group.join()
    data_plane_of(own_app.app).reader = ShortReader(times=1)  # partition 0's read comes back short
    first = group.pull(member)
    assert sorted((m["partition"], m["offset"]) for m in first) == sorted(
        p for p in published if p[0] == 1
    )
    assert {m["attempt"] for m in first} == {1}
    again = group.pull(member)
    assert sorted((m["partition"], m["offset"]) for m in again) == sorted(
        p for p in published if p[0] == 0
    )
    assert {m["attempt"] for m in again} == {2}
    assert_in_offset_order(again)
    assert group.ack(*(m["ackId"] for m in first + again)).status_code == 200
    assert group.offsets(0)["lag"] == group.offsets(1)["lag"] == 0
    assert group.pull(member) == []
