"""Read models of the tenant dashboard, each one call: topics with their depth, a topic with its
partitions and consumer groups, a group with its lag history.

Every read is filtered by the caller's environment, as the API's are: another environment's
topic or group is not found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from data_plane.groups import lag
from data_plane.groups import service as groups
from data_plane.groups.service import Conn
from data_plane.topics import queries as q
from data_plane.topics import service as topic_service
from data_plane.topics.service import Topic


@dataclass(frozen=True, slots=True)
class TopicSummary:
    """A topic and the messages it retains."""

    topic: Topic
    depth: int


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """A partition's earliest retained offset and high watermark."""

    partition: int
    start_offset: int
    next_offset: int

    @property
    def depth(self) -> int:
        """Messages retained in the partition."""
        return self.next_offset - self.start_offset


@dataclass(frozen=True, slots=True)
class TopicDetail:
    """A topic, its statistics, partitions and consumer groups."""

    topic: Topic
    stats: dict[str, int]  # as data_plane.groups.service.topic_stats counts them
    partitions: list[PartitionSummary]
    groups: list[dict[str, Any]]  # as data_plane.groups.service.list_groups lists them


@dataclass(frozen=True, slots=True)
class GroupDetail:
    """A group as :func:`data_plane.groups.service.describe` shows it, and its recent lag series."""

    state: dict[str, Any]
    lag: lag.LagSeries


async def topic_summaries(conn: Conn, environment_id: str) -> list[TopicSummary]:
    """The environment's active topics by name, each with its depth."""
    topics = await topic_service.list_topics(conn, environment_id)
    params = {"environment_id": environment_id}
    rows = await (await conn.execute(q.TOPIC_DEPTHS, params)).fetchall()
    depths = {row["id"]: int(row["depth"]) for row in rows}
    return [TopicSummary(topic, depths.get(topic.id, 0)) for topic in topics]


async def topic_detail(conn: Conn, environment_id: str, name: str) -> TopicDetail:
    """One topic with its partitions and groups, or ``TOPIC_NOT_FOUND``."""
    topic = await topic_service.get_topic(conn, environment_id, name)
    rows = await (await conn.execute(q.SELECT_PARTITIONS, {"topic_id": topic.id})).fetchall()
    return TopicDetail(
        topic=topic,
        stats=await groups.topic_stats(conn, topic.id),
        partitions=[PartitionSummary(**row) for row in rows],
        groups=await groups.list_groups(conn, environment_id, name),
    )


async def group_detail(conn: Conn, environment_id: str, topic: str, group: str) -> GroupDetail:
    """A group's members, partitions and dead letters, and its lag over the last hour."""
    state = await groups.describe(conn, environment_id, topic, group)
    return GroupDetail(state, await lag.lag_series(conn, environment_id, topic, group))
