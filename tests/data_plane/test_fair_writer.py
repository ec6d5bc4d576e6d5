"""Fair shares between organisations in the segment writer: a flood waits behind its own backlog,
and organisations share a contended writer by the weights of their tiers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from dataclasses import dataclass

from data_plane.write.fair import QUANTUM_BYTES, FairQueue
from data_plane.write.segment import Message
from data_plane.write.writer import CommittedBlock, Entry, SegmentWriter, TopicTarget
from tenants.tiers import TIER_LIMITS, tier_weight
from tests.data_plane.test_triage import new_target
from tests.data_plane.test_writer import FAST, index_rows, with_writer
from tests.support.services import Services

CAP = 256 * 1024  # one organisation's bytes in flushes in flight
FLOOD_PUBLISHES, FLOOD_BYTES = 40, 64 * 1024  # 2.5 MiB of batches queued at once


def org_topic(database_url: str) -> TopicTarget:
    """A topic of a new Pro organisation, with the weight the topic directory would give it."""
    weight = tier_weight(TIER_LIMITS["pro"].publish_per_s)
    return dataclasses.replace(new_target(database_url), weight=weight)


def batch(tag: str, size: int) -> list[Entry]:
    """One publish of a single message of about ``size`` bytes."""
    now_ms = time.time_ns() // 1_000_000
    return [Entry(0, Message(None, {}, b'"' + tag.encode() * (size // len(tag)) + b'"', now_ms))]


def test_a_flooding_organisation_waits_behind_its_own_backlog(services: Services) -> None:
    flood = org_topic(services.database_url)
    quiet = org_topic(services.database_url)
    commits: list[Counter[str]] = []  # per commit: messages of each topic

    def committed(blocks: list[CommittedBlock]) -> None:
        commits.append(Counter({b.topic_id: len(b.messages) for b in blocks}))

    async def work(writer: SegmentWriter) -> None:
        # The whole flood is queued before the quiet organisation's one message.
        floods = [writer.write(flood, batch(f"f{i}", FLOOD_BYTES)) for i in range(FLOOD_PUBLISHES)]
        await asyncio.gather(*floods, writer.write(quiet, batch("q", 100)))

    with_writer(work, [committed], dataclasses.replace(FAST, org_inflight_bytes=CAP))
    quiet_commit = next(i for i, c in enumerate(commits) if c[quiet.id])
    flood_before = sum(c[flood.id] for c in commits[: quiet_commit + 1])
    # The quiet message went out with at most the flood's in-flight share, not behind 2.5 MiB.
    assert flood_before * FLOOD_BYTES <= CAP + FLOOD_BYTES
    assert sum(c[flood.id] for c in commits) == FLOOD_PUBLISHES  # the flood lost nothing
    rows = index_rows(services.database_url, flood.id)
    assert sum(r["count"] for r in rows) == FLOOD_PUBLISHES
    offsets = [(r["base_offset"], r["count"]) for r in rows]
    assert offsets == sorted(offsets) and offsets[0][0] == 0  # consecutive, in commit order


@dataclass
class Waiting:
    owner: str
    weight: int
    size_bytes: int


def test_a_contended_writer_is_shared_by_tier_weight() -> None:
    developer = tier_weight(TIER_LIMITS["developer"].publish_per_s)
    pro = tier_weight(TIER_LIMITS["pro"].publish_per_s)
    assert (developer, pro) == (1, 10)
    queue: FairQueue[Waiting] = FairQueue(inflight_cap=1 << 40, max_flushes=1000)
    for _ in range(5000):  # 5 MB each: more than the flushes below take
        queue.add(Waiting("dev", developer, 1024))
        queue.add(Waiting("pro", pro, 1024))
    served: Counter[str] = Counter()
    for _ in range(3):  # three flushes, far smaller together than the backlog
        for publish in queue.take(budget=11 * QUANTUM_BYTES):
            served[publish.owner] += publish.size_bytes
    assert served["pro"] == 10 * served["dev"]


def test_an_organisation_at_its_cap_leaves_the_flush_to_others() -> None:
    queue: FairQueue[Waiting] = FairQueue(inflight_cap=CAP, max_flushes=3)
    big = [Waiting("flood", 10, CAP * 2) for _ in range(3)]  # each above the cap on its own
    for publish in big:
        queue.add(publish)
    first = queue.take(budget=1 << 30)
    assert first == big[:1]  # over the cap alone: one publish, never stuck
    queue.add(Waiting("quiet", 1, 100))
    assert [p.owner for p in queue.take(budget=1 << 30)] == ["quiet"]
    assert queue.ready_bytes() == 0 and queue.take(budget=1 << 30) == []
    queue.done(first)  # the flood's flush ended: its next publish may go
    assert queue.take(budget=1 << 30) == big[1:2]
