"""The periodic group sweep: a silent member loses its partitions, and partitions added to a topic
get owners, even when the members only pull or stream (and so never run the membership
operations that do both lazily)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from litestar.testing import TestClient
from psycopg.rows import dict_row

from data_plane import tasks
from data_plane.delivery import queries as q
from data_plane.delivery.leases import group_by_lease
from data_plane.groups import service as groups
from tenants.models import NewOrganisation
from tests.data_plane.test_tasks import on_worker
from tests.support.processes import replicas, wait_for
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

QUIET_SESSION = "1s"  # the shortest session a group accepts
QUIET_SESSION_S = 1.0
KEYS = [f"k{i}" for i in range(40)]  # these keys hash to all four partitions


class Http:
    """The few calls these tests make, on the in-process app or on a served process."""

    def __init__(self, http: TestClient | httpx.Client, org: NewOrganisation, topic: str) -> None:
        self.http, self.topic = http, topic
        self.headers = bearer(org.keys["production"].secret)

    def create_topic(self, partitions: int = 4) -> str:
        response = self.http.post(
            "/v1/topics", json={"name": self.topic, "partitions": partitions}, headers=self.headers
        )
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def group(self, group: str) -> str:
        return f"/v1/topics/{self.topic}/groups/{group}"

    def join(self, group: str, session_timeout: str) -> dict[str, Any]:
        response = self.http.post(
            f"{self.group(group)}/members",
            json={"sessionTimeout": session_timeout},
            headers=self.headers,
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    def publish_everywhere(self) -> dict[int, set[int]]:
        """One message per key; the offsets published, by partition."""
        response = self.http.post(
            f"/v1/topics/{self.topic}/messages/batch",
            json={"messages": [{"data": key, "key": key} for key in KEYS]},
            headers=self.headers,
        )
        assert response.status_code == 201, response.text
        published: dict[int, set[int]] = {}
        for result in response.json()["results"]:
            published.setdefault(result["partition"], set()).add(result["offset"])
        assert set(published) == {0, 1, 2, 3}
        return published

    def publish_everywhere_two(self) -> set[int]:
        """One message per key to a two-partition topic; the partitions they landed on."""
        response = self.http.post(
            f"/v1/topics/{self.topic}/messages/batch",
            json={"messages": [{"data": key, "key": key} for key in KEYS]},
            headers=self.headers,
        )
        assert response.status_code == 201, response.text
        return {result["partition"] for result in response.json()["results"]}

    def pull(self, group: str, member: str) -> dict[int, set[int]]:
        """Everything the member can pull now: offsets by partition."""
        response = self.http.post(
            f"{self.group(group)}/members/{member}/pull",
            json={"maxMessages": 1000},
            headers=self.headers,
        )
        assert response.status_code == 200, response.text
        return by_partition(response.json()["messages"])

    def describe(self, group: str) -> dict[str, Any]:
        response = self.http.get(self.group(group), headers=self.headers)
        assert response.status_code == 200, response.text
        return dict(response.json())


def by_partition(messages: list[dict[str, Any]]) -> dict[int, set[int]]:
    pulled: dict[int, set[int]] = {}
    for message in messages:
        pulled.setdefault(message["partition"], set()).add(message["offset"])
    return pulled


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


def wait_past_session(silent_since: float) -> None:
    """Until a member last heard of at ``silent_since`` (monotonic) is past its session."""
    time.sleep(max(silent_since + QUIET_SESSION_S + 0.2 - time.monotonic(), 0))


def test_a_member_that_only_pulls_gets_the_silent_members_partitions_after_the_task(
    client: TestClient, org: NewOrganisation, celery_worker: Path, unique: Callable[[str], str]
) -> None:
    api = Http(client, org, f"evict.{unique('t')}")
    topic_id = api.create_topic()
    quiet = api.join("g", QUIET_SESSION)
    puller = api.join("g", "30s")
    own = set(puller["assignments"])
    stranded = {0, 1, 2, 3} - own
    assert len(own) == 2 and len(stranded) == 2
    published = api.publish_everywhere()
    # The quiet member leases its partitions' messages, then dies.
    assert api.pull("g", quiet["memberId"]) == {p: published[p] for p in stranded}
    silent_since = time.monotonic()
    assert api.pull("g", puller["memberId"]) == {p: published[p] for p in own}
    wait_past_session(silent_since)
    # Pulling keeps the puller alive but evicts nobody: the quiet member's partitions are stuck.
    assert api.pull("g", puller["memberId"]) == {}

    report = on_worker("data_plane.sweep_groups", topic_id=topic_id)

    assert report == {"groupsSwept": 1, "membersEvicted": 1, "groupsGrown": 0}
    # Its partitions and its leases (ended by the eviction, not left to the 30 s ack timeout).
    assert api.pull("g", puller["memberId"]) == {p: published[p] for p in stranded}
    described = api.describe("g")
    assert [p["consumer"] for p in described["partitions"]] == [puller["memberId"]] * 4
    assert [m["id"] for m in described["members"]] == [puller["memberId"]]
    generation = described["generationId"]
    assert generation > puller["generationId"]

    again = tasks.sweep_groups(topic_id=topic_id)  # in this process, same code

    assert again == {"groupsSwept": 0, "membersEvicted": 0, "groupsGrown": 0}
    described = api.describe("g")
    assert described["generationId"] == generation
    assert [p["consumer"] for p in described["partitions"]] == [puller["memberId"]] * 4
    gone = client.post(
        f"{api.group('g')}/members/{quiet['memberId']}/heartbeat", headers=api.headers
    )
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "MEMBER_NOT_FOUND"


def test_a_group_whose_members_are_alive_is_left_untouched(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    api = Http(client, org, f"evict.{unique('t')}")
    api.create_topic()
    api.join("idle", QUIET_SESSION)
    silent_since = time.monotonic()
    survivor = api.join("idle", "30s")
    busy = [api.join("busy", "30s"), api.join("busy", "30s")]
    before = api.describe("busy")
    wait_past_session(silent_since)

    report = tasks.sweep_groups()  # every group, as beat runs it

    assert report["groupsSwept"] >= 1 and report["membersEvicted"] >= 1
    after = api.describe("busy")
    assert after["generationId"] == before["generationId"]
    assert after["partitions"] == before["partitions"]
    assert sorted(m["id"] for m in after["members"]) == sorted(m["memberId"] for m in busy)
    idle = api.describe("idle")
    assert [p["consumer"] for p in idle["partitions"]] == [survivor["memberId"]] * 4


@pytest.fixture
def served(
    services: Services, org: NewOrganisation, tmp_path: Path, unique: Callable[[str], str]
) -> Iterator[tuple[Http, str]]:
    """A 4-partition topic on one real ``queuecore serve`` process (for SSE), and its id."""
    with (
        httpx.Client(timeout=30) as http,
        replicas(services.env(), tmp_path, count=1) as (replica,),
    ):
        http.base_url = httpx.URL(replica.url)
        api = Http(http, org, f"evict.{unique('t')}")
        yield api, api.create_topic()


@contextmanager
def streaming(api: Http, member: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """The member's SSE stream, read in a thread: the messages received so far."""
    assert isinstance(api.http, httpx.Client)
    received: list[dict[str, Any]] = []
    opened = threading.Event()
    path = f"{api.group('g')}/members/{member['memberId']}/stream"
    reader = threading.Thread(
        target=listen, args=(api.http, path, api.headers, received, opened), daemon=True
    )
    reader.start()
    assert opened.wait(10), "the stream did not open"
    yield received  # the thread ends when the server goes away


def listen(
    http: httpx.Client,
    path: str,
    headers: dict[str, str],
    received: list[dict[str, Any]],
    opened: threading.Event,
) -> None:
    """Collect a stream's messages until the server goes away."""
    try:
        with http.stream("GET", path, headers=headers, timeout=60) as response:
            opened.set()
            for line in response.iter_lines():
                if line.startswith("data:"):
                    received.append(json.loads(line[5:]))
    except httpx.HTTPError:
        return


@pytest.mark.e2e
def test_a_streaming_survivor_receives_the_silent_members_partitions_at_once(
    served: tuple[Http, str],
) -> None:
    api, topic_id = served
    api.join("g", QUIET_SESSION)
    silent_since = time.monotonic()
    streamer = api.join("g", "30s")
    stranded = {0, 1, 2, 3} - set(streamer["assignments"])
    with streaming(api, streamer) as received:
        published = api.publish_everywhere()
        mine = {p: offsets for p, offsets in published.items() if p not in stranded}
        wait_for(lambda: by_partition(received) == mine, 10, "the streamer's own messages")
        wait_past_session(silent_since)
        assert by_partition(received) == mine  # nothing of the silent member's partitions

        assert tasks.sweep_groups(topic_id=topic_id)["membersEvicted"] == 1

        # Well inside the stream's 15 s keep-alive: the rebalance's NOTIFY woke it.
        wait_for(lambda: by_partition(received) == published, 5, "the stranded messages")


@pytest.mark.e2e
def test_a_member_that_only_streams_is_never_evicted_as_silent(
    served: tuple[Http, str],
) -> None:
    api, topic_id = served
    streamer = api.join("g", QUIET_SESSION)  # never heartbeats: only its stream is open
    with streaming(api, streamer) as received:
        time.sleep(4 * QUIET_SESSION_S)  # idle, four sessions long

        assert tasks.sweep_groups(topic_id=topic_id)["membersEvicted"] == 0

        published = api.publish_everywhere()
        wait_for(lambda: by_partition(received) == published, 10, "the messages on the stream")
        assert [m["id"] for m in api.describe("g")["members"]] == [streamer["memberId"]]


@pytest.mark.parametrize("removal", ["eviction", "leave"])
def test_removing_a_member_whose_ack_is_in_flight_does_not_deadlock(
    client: TestClient,
    org: NewOrganisation,
    services: Services,
    unique: Callable[[str], str],
    removal: str,
) -> None:
    """An ack locks its partitions, then its leases; removing a member must not take a lease first.

    A slow consumer acks a lease of a partition that already moved to another member just as it
    is evicted (or leaves): removing it does not touch that partition's row. The ack holds the
    partition row (LOCK_ACK_PARTITIONS) and next needs the lease row, which the removal ends
    before it reassigns every partition: taken in that order, the two waited for each other
    until PostgreSQL broke the cycle after deadlock_timeout by failing one of them.
    """
    api = Http(client, org, f"evict.{unique('t')}")
    topic_id = api.create_topic(partitions=2)
    slow = api.join("g", QUIET_SESSION)
    published = api.publish_everywhere_two()
    leased = client.post(
        f"{api.group('g')}/members/{slow['memberId']}/pull",
        json={"maxMessages": 100},
        headers=api.headers,
    ).json()["messages"]
    assert {m["partition"] for m in leased} == set(published) == {0, 1}
    silent_since = time.monotonic()
    other = api.join("g", "30s")  # takes one of the slow member's partitions, not its leases
    (moved,) = other["assignments"]
    ack_id = next(m["ackId"] for m in leased if m["partition"] == moved)
    (lease_id,), _ = group_by_lease([ack_id])
    wait_past_session(silent_since)
    environment_id = org.keys["production"].key.environment_id

    async def remove(conn: psycopg.AsyncConnection[Any]) -> int:
        if removal == "eviction":
            return (await groups.sweep_groups(conn, topic_id)).members_evicted
        async with conn.transaction():
            await groups.leave(conn, environment_id, api.topic, "g", slow["memberId"])
        return 1

    async def race() -> tuple[int, str | None]:
        async with (
            await psycopg.AsyncConnection.connect(
                services.database_url, row_factory=dict_row
            ) as ack,
            await psycopg.AsyncConnection.connect(
                services.database_url, row_factory=dict_row, autocommit=True
            ) as remover,
        ):
            group = "SELECT id FROM consumer_groups WHERE topic_id = %s AND name = 'g'"
            row = await (await ack.execute(group, (topic_id,))).fetchone()
            assert row is not None
            params = {"group_id": row["id"], "lease_ids": [lease_id], "ack_ids": []}
            await ack.execute(q.LOCK_ACK_PARTITIONS, params)  # the ack's first step
            removing = asyncio.create_task(remove(remover))
            await asyncio.sleep(0.5)  # the removal is now waiting on a lock
            error = None
            try:  # the ack's next step: its lease row
                await ack.execute(
                    "SELECT 1 FROM group_leases WHERE lease_id = %s FOR UPDATE", (lease_id,)
                )
                await ack.commit()
            except psycopg.errors.DeadlockDetected as exc:
                error = type(exc).__name__
                await ack.rollback()
            try:
                removed = await asyncio.wait_for(removing, 10)
            except psycopg.errors.DeadlockDetected as exc:
                error, removed = type(exc).__name__, 0
            return removed, error

    removed, error = asyncio.run(race())

    assert error is None
    assert removed == 1
    described = api.describe("g")
    assert [p["consumer"] for p in described["partitions"]] == [other["memberId"]] * 2


def test_partitions_added_to_the_topic_reach_a_member_that_only_pulls_after_the_sweep(
    client: TestClient, org: NewOrganisation, unique: Callable[[str], str]
) -> None:
    api = Http(client, org, f"evict.{unique('t')}")
    topic_id = api.create_topic(partitions=2)
    puller = api.join("g", "30s")
    assert puller["assignments"] == [0, 1]
    grown = client.patch(f"/v1/topics/{api.topic}", json={"partitions": 4}, headers=api.headers)
    assert grown.status_code == 200, grown.text
    published = api.publish_everywhere()  # to all four partitions
    # The puller never heartbeats: nothing has given partitions 2 and 3 an owner yet.
    assert api.pull("g", puller["memberId"]) == {p: published[p] for p in (0, 1)}

    report = tasks.sweep_groups(topic_id=topic_id)

    assert report == {"groupsSwept": 1, "membersEvicted": 0, "groupsGrown": 1}
    assert api.pull("g", puller["memberId"]) == {p: published[p] for p in (2, 3)}
    described = api.describe("g")
    assert described["generationId"] > puller["generationId"]
    assert [p["consumer"] for p in described["partitions"]] == [puller["memberId"]] * 4
    assert tasks.sweep_groups(topic_id=topic_id)["groupsSwept"] == 0
