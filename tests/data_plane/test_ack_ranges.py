"""An ack of range ackIds in one round trip: one statement in autocommit mode acks every lease
whose named offsets are all open; the ids it cannot settle that way are judged one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from litestar.testing import TestClient
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from data_plane import delivery
from data_plane.delivery import queries as q
from data_plane.delivery.model import UNKNOWN_ACK, AckOutcome
from tenants.models import NewOrganisation
from tests.data_plane.test_consume_api import Group
from tests.data_plane.test_pulls import CountingConnection, lookup_ref, publish_keyed
from tests.support.services import Services
from tests.support.tenancy import new_organisation

Statements = list[tuple[str, bool]]


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def ack_directly(
    database_url: str, group: Group, ack_ids: list[str]
) -> tuple[AckOutcome, Statements, tuple[bool, TransactionStatus]]:
    """``delivery.ack`` on a connection that counts its statements (the lookup not counted)."""

    async def run() -> tuple[AckOutcome, Statements, tuple[bool, TransactionStatus]]:
        async with await CountingConnection.connect(database_url, row_factory=dict_row) as conn:
            conn.statements = []
            ref = await lookup_ref(conn, group)
            conn.statements = []
            outcome = await delivery.ack(conn, ref, ack_ids)
            await conn.commit()  # as the pool does when the connection goes back
            return outcome, conn.statements, (conn.autocommit, conn.info.transaction_status)

    return asyncio.run(run())


def test_an_ack_of_open_range_ids_is_one_statement_and_moves_the_committed_offsets(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique, partitions=2)
    published = publish_keyed(group)
    delivered = group.pull(group.join())
    assert {(d["partition"], d["offset"]) for d in delivered} == published
    ack_ids = [d["ackId"] for d in delivered]

    outcome, statements, after = ack_directly(services.database_url, group, ack_ids)

    assert statements == [(q.ACK_RANGES, True)], "one statement, no BEGIN and no COMMIT"
    assert after == (False, TransactionStatus.IDLE)
    assert sorted(outcome.done) == sorted(ack_ids) and outcome.rejected == []
    assert group.offsets(0)["lag"] == group.offsets(1)["lag"] == 0


def test_ids_the_statement_cannot_settle_are_judged_one_by_one(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str], services: Services
) -> None:
    group = Group(client, org, unique, partitions=2)
    publish_keyed(group)
    delivered = group.pull(group.join())
    first = [d["ackId"] for d in delivered if d["partition"] == 0]
    second = [d["ackId"] for d in delivered if d["partition"] == 1]
    assert len(first) >= 2
    assert group.ack(first[-1]).status_code == 200  # its lease lives on, that offset acked
    stranger = "ack_" + "Z" * 16 + "000"  # well-formed range id of a lease that never existed

    outcome, statements, _ = ack_directly(services.database_url, group, [*first, *second, stranger])

    assert statements[0] == (q.ACK_RANGES, True)
    assert len(statements) > 1, "the acked-before and unknown ids went the one-by-one way"
    assert sorted(outcome.done) == sorted(first + second)
    assert outcome.rejected == [{"ackId": stranger, "reason": UNKNOWN_ACK}]
    assert group.offsets(0)["lag"] == group.offsets(1)["lag"] == 0
