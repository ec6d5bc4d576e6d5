"""The read path: index lookup, ranged GETs, the block cache, and the message browser API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from litestar.testing import TestClient
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from core.db import connect
from data_plane.errors import TopicNotFound
from data_plane.faults import FaultyObjectStore
from data_plane.read.cache import BlockCache, block_size_bytes
from data_plane.read.reader import (
    ObjectStoreUnavailable,
    OffsetOutOfRange,
    ReadResult,
    SegmentReader,
    SegmentUnreadable,
)
from tests.data_plane.stored import (
    SeededTopic,
    commit_segment,
    messages,
    object_store,
    seed_topic,
)
from tests.support.runtime import data_plane_of
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation


def read(
    reader: SegmentReader, database_url: str, topic_id: str, partition: int, offset: int, limit: int
) -> ReadResult:
    """One read on a fresh connection."""

    async def _read() -> ReadResult:
        async with await AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
            return await reader.read(conn, topic_id, partition, offset, limit)

    return asyncio.run(_read())


def browse(client: TestClient, topic: SeededTopic, partition: int, **params: int) -> object:
    return client.get(
        f"/v1/topics/{topic.name}/partitions/{partition}/messages",
        params=params,
        headers=bearer(topic.secret),
    )


@pytest.fixture
def three_blocks(services: Services, unique: Callable[[str], str]) -> SeededTopic:
    """Partition 0 holds offsets 0-2, 3-6 and 7-11 in three objects; partition 1 offsets 0-1."""
    topic = seed_topic(services.database_url, unique("orders.read"))
    store = object_store()
    commit_segment(
        services.database_url,
        store,
        {(topic.id, 0): messages(3, "a"), (topic.id, 1): messages(2, "other")},
    )
    commit_segment(services.database_url, store, {(topic.id, 0): messages(4, "b")})
    commit_segment(services.database_url, store, {(topic.id, 0): messages(5, "c")})
    return topic


def test_browse_spans_blocks_and_returns_each_message_at_its_offset(
    client: TestClient, three_blocks: SeededTopic
) -> None:
    response = browse(client, three_blocks, 0, offset=2, limit=6)
    assert response.status_code == 200, response.text
    page = response.json()
    assert [m["offset"] for m in page["messages"]] == [2, 3, 4, 5, 6, 7]
    assert [m["data"] for m in page["messages"]] == [
        {"tag": "a", "n": 2},
        {"tag": "b", "n": 0},
        {"tag": "b", "n": 1},
        {"tag": "b", "n": 2},
        {"tag": "b", "n": 3},
        {"tag": "c", "n": 0},
    ]
    first = page["messages"][0]
    assert first["topic"] == three_blocks.name
    assert first["partition"] == 0
    assert first["key"] == "k2"
    assert first["headers"] == {"h": "a-2"}
    assert first["timestamp"].endswith("Z") and "T" in first["timestamp"]
    assert first["messageId"].startswith("msg_")
    assert len({m["messageId"] for m in page["messages"]}) == 6
    assert (page["nextOffset"], page["earliestOffset"], page["latestOffset"]) == (8, 0, 12)


def test_browse_defaults_to_the_earliest_offset_and_keeps_partitions_apart(
    client: TestClient, three_blocks: SeededTopic
) -> None:
    whole = browse(client, three_blocks, 0).json()
    assert [m["offset"] for m in whole["messages"]] == list(range(12))
    other = browse(client, three_blocks, 1).json()
    assert [m["data"]["tag"] for m in other["messages"]] == ["other", "other"]
    assert other["nextOffset"] == 2


def test_paging_with_next_offset_reads_every_message_once(
    client: TestClient, three_blocks: SeededTopic
) -> None:
    seen, offset = [], 0
    while True:
        page = browse(client, three_blocks, 0, offset=offset, limit=5).json()
        if not page["messages"]:
            break
        seen += [m["offset"] for m in page["messages"]]
        offset = page["nextOffset"]
    assert seen == list(range(12))
    assert offset == 12


def test_reading_at_the_end_is_an_empty_page_and_past_it_is_416(
    client: TestClient, three_blocks: SeededTopic
) -> None:
    tail = browse(client, three_blocks, 0, offset=12)
    assert tail.status_code == 200
    assert tail.json()["messages"] == []
    assert tail.json()["nextOffset"] == 12
    past = browse(client, three_blocks, 0, offset=13)
    assert past.status_code == 416
    error = past.json()["error"]
    assert error["code"] == "OFFSET_OUT_OF_RANGE"
    assert "0..12" in error["message"]
    assert error["requestId"].startswith("req_")


def test_offsets_dropped_by_retention_are_416_naming_the_earliest(
    client: TestClient, services: Services, three_blocks: SeededTopic
) -> None:
    with connect(services.database_url) as conn:
        conn.execute(
            "DELETE FROM segment_blocks WHERE topic_id = %s AND partition = 0 AND base_offset = 0",
            (three_blocks.id,),
        )
        conn.execute(
            "UPDATE partitions SET start_offset = 3 WHERE topic_id = %s AND partition = 0",
            (three_blocks.id,),
        )
    gone = browse(client, three_blocks, 0, offset=1)
    assert gone.status_code == 416
    assert gone.json()["error"]["code"] == "OFFSET_OUT_OF_RANGE"
    assert "before the earliest" in gone.json()["error"]["message"]
    assert "3..12" in gone.json()["error"]["message"]
    page = browse(client, three_blocks, 0).json()
    assert page["earliestOffset"] == 3
    assert [m["offset"] for m in page["messages"]] == list(range(3, 12))


def test_unknown_topic_partition_and_bad_parameters_are_clear_errors(
    client: TestClient, services: Services, three_blocks: SeededTopic
) -> None:
    missing = client.get(
        "/v1/topics/no.such.topic/partitions/0/messages", headers=bearer(three_blocks.secret)
    )
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "TOPIC_NOT_FOUND"
    no_partition = browse(client, three_blocks, 2)
    assert no_partition.status_code == 404
    assert no_partition.json()["error"]["code"] == "PARTITION_NOT_FOUND"
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}):
        response = browse(client, three_blocks, 0, **bad)
        assert response.status_code in (400, 422), (bad, response.text)
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"


def test_another_environment_cannot_browse_the_topic(
    client: TestClient, services: Services, three_blocks: SeededTopic
) -> None:
    stranger = new_organisation(services.database_url)
    response = client.get(
        f"/v1/topics/{three_blocks.name}/partitions/0/messages",
        headers=bearer(stranger.keys["production"].secret),
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "TOPIC_NOT_FOUND"


def test_a_topic_being_deleted_reads_as_not_found(
    client: TestClient, services: Services, three_blocks: SeededTopic
) -> None:
    assert browse(client, three_blocks, 0).status_code == 200
    with connect(services.database_url) as conn:
        conn.execute("UPDATE topics SET status = 'deleting' WHERE id = %s", (three_blocks.id,))
    response = browse(client, three_blocks, 0)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "TOPIC_NOT_FOUND"
    reader = SegmentReader(object_store())
    with pytest.raises(TopicNotFound):
        read(reader, services.database_url, three_blocks.id, 0, 0, 10)


def test_a_cached_block_is_served_without_a_get(
    services: Services, three_blocks: SeededTopic
) -> None:
    store = FaultyObjectStore(object_store())
    reader = SegmentReader(store, BlockCache())
    first = read(reader, services.database_url, three_blocks.id, 0, 0, 100)
    assert store.calls["get"] == 3  # one ranged GET per block
    again = read(reader, services.database_url, three_blocks.id, 0, 0, 100)
    assert store.calls["get"] == 3
    assert again.messages == first.messages
    assert [m.offset for m in again.messages] == list(range(12))


def test_blocks_put_by_the_writer_are_read_from_the_cache(
    services: Services, unique: Callable[[str], str]
) -> None:
    topic = seed_topic(services.database_url, unique("fresh"), partitions=1)
    fresh = messages(4, "fresh")
    commit_segment(services.database_url, object_store(), {(topic.id, 0): fresh})
    store = FaultyObjectStore(object_store())
    reader = SegmentReader(store, BlockCache())
    reader.cache.put(topic.id, 0, 0, fresh)  # what the writer does after its commit
    result = read(reader, services.database_url, topic.id, 0, 1, 10)
    assert store.calls["get"] == 0
    assert [json.loads(m.message.value)["n"] for m in result.messages] == [1, 2, 3]


def test_the_cache_stays_within_its_byte_bound_and_evicts_the_oldest(
    services: Services, three_blocks: SeededTopic
) -> None:
    largest = block_size_bytes(messages(5, "c"))
    store = FaultyObjectStore(object_store())
    reader = SegmentReader(store, BlockCache(max_bytes=largest + 10))
    read(reader, services.database_url, three_blocks.id, 0, 0, 3)  # block 0-2
    read(reader, services.database_url, three_blocks.id, 0, 7, 5)  # block 7-11 evicts it
    stats = reader.cache.stats()
    assert stats.size_bytes <= stats.max_bytes
    assert stats.evictions >= 1
    assert store.calls["get"] == 2
    read(reader, services.database_url, three_blocks.id, 0, 7, 5)
    assert store.calls["get"] == 2  # still cached
    read(reader, services.database_url, three_blocks.id, 0, 0, 3)
    assert store.calls["get"] == 3  # evicted: fetched again


def test_a_corrupted_object_is_an_error_never_garbage(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    topic = seed_topic(services.database_url, unique("corrupt"), partitions=1)
    store = object_store()
    key = commit_segment(services.database_url, store, {(topic.id, 0): messages(20, "x")})
    with connect(services.database_url) as conn:
        row = conn.execute(
            "SELECT byte_offset + byte_length - 2 AS inside FROM segment_blocks WHERE topic_id = %s",
            (topic.id,),
        ).fetchone()
    assert row is not None
    data = bytearray(store.get(key))
    data[row["inside"]] ^= 0x01  # one bit of the block's compressed payload
    store.put(key, bytes(data))
    response = browse(client, topic, 0)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "SEGMENT_UNREADABLE"
    assert "checksum" in error["message"]
    assert "messages" not in response.json()
    with pytest.raises(SegmentUnreadable):
        read(SegmentReader(store), services.database_url, topic.id, 0, 0, 5)


def test_an_index_row_pointing_at_another_partitions_block_is_refused(
    services: Services, unique: Callable[[str], str]
) -> None:
    topic = seed_topic(services.database_url, unique("mixed"), partitions=2)
    store = object_store()
    commit_segment(
        services.database_url,
        store,
        {(topic.id, 0): messages(2, "zero"), (topic.id, 1): messages(2, "one")},
    )
    with connect(services.database_url) as conn:
        conn.execute(
            "UPDATE segment_blocks SET byte_offset = b.byte_offset, byte_length = b.byte_length"
            " FROM segment_blocks b WHERE segment_blocks.topic_id = %s"
            " AND segment_blocks.partition = 0 AND b.topic_id = %s AND b.partition = 1",
            (topic.id, topic.id),
        )
    with pytest.raises(SegmentUnreadable, match="index expects"):
        read(SegmentReader(store), services.database_url, topic.id, 0, 0, 5)


def test_an_s3_outage_during_a_read_is_503_and_reads_recover(
    services: Services, three_blocks: SeededTopic
) -> None:
    store = FaultyObjectStore(object_store(), seed=7)
    reader = SegmentReader(store, BlockCache())
    store.fail_always("get")
    with pytest.raises(ObjectStoreUnavailable) as raised:
        read(reader, services.database_url, three_blocks.id, 0, 0, 100)
    assert raised.value.code == "SERVICE_UNAVAILABLE"
    assert reader.cache.stats().entries == 0
    store.heal()
    healed = read(reader, services.database_url, three_blocks.id, 0, 0, 100)
    assert [m.offset for m in healed.messages] == list(range(12))


def test_out_of_range_error_carries_the_bounds(
    services: Services, three_blocks: SeededTopic
) -> None:
    with pytest.raises(OffsetOutOfRange) as raised:
        read(SegmentReader(object_store()), services.database_url, three_blocks.id, 0, 50, 1)
    assert raised.value.data == {"offset": 50, "earliest": 0, "latest": 12}


def test_published_messages_are_browsable_with_the_same_ids_and_come_from_the_cache(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    org = new_organisation(services.database_url)
    headers = bearer(org.keys["development"].secret)
    name = unique("published")
    created = client.post("/v1/topics", json={"name": name, "partitions": 2}, headers=headers)
    assert created.status_code == 201, created.text
    reader = data_plane_of(client.app).reader  # the writer fills its cache
    sent = [
        client.post(
            f"/v1/topics/{name}/messages",
            json={"data": {"n": n}, "key": "same-key", "headers": {"trace": str(n)}},
            headers=headers,
        ).json()
        for n in range(3)
    ]
    partition = sent[0]["partition"]
    assert {s["partition"] for s in sent} == {partition}
    hits_before = reader.cache.stats().hits
    page = client.get(
        f"/v1/topics/{name}/partitions/{partition}/messages",
        params={"offset": sent[0]["offset"]},
        headers=headers,
    ).json()
    assert [(m["messageId"], m["offset"], m["timestamp"]) for m in page["messages"]] == [
        (s["messageId"], s["offset"], s["timestamp"]) for s in sent
    ]
    assert [m["data"] for m in page["messages"]] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert [m["headers"] for m in page["messages"]] == [
        {"trace": "0"},
        {"trace": "1"},
        {"trace": "2"},
    ]
    assert all(m["key"] == "same-key" for m in page["messages"])
    assert reader.cache.stats().hits >= hits_before + len(sent)  # blocks the writer cached


def test_injected_failures_are_replayable_from_the_seed(services: Services) -> None:
    def pattern(seed: int) -> list[bool]:
        store = FaultyObjectStore(object_store(), seed=seed)
        store.fail_randomly("ping", 0.5)
        outcomes = []
        for _ in range(12):
            try:
                store.ping()
                outcomes.append(True)
            except ConnectionError:
                outcomes.append(False)
        return outcomes

    assert pattern(3) == pattern(3)
    assert True in pattern(3) and False in pattern(3)
