"""Per-organisation admission of publish work: a flood waits behind its own backlog, never in
front of another organisation's request."""

from __future__ import annotations

import asyncio

from control_plane.edge.admission import (
    MIN_REQUEST_BYTES,
    SHARED_FOR_S,
    OrgAdmission,
    request_bytes,
)
from tenants.tiers import TIER_LIMITS, tier_weight

PRO = tier_weight(TIER_LIMITS["pro"].publish_per_s)
BATCH = 100 * 1024


def test_a_flood_waits_behind_its_own_backlog_not_in_front_of_others() -> None:
    async def scenario() -> None:
        admission = OrgAdmission(bytes_per_weight=32 * 1024)  # Pro: 320 KiB in the works
        admitted: list[str] = []

        async def publish(org: str, name: str, size: int) -> None:
            await admission.acquire(org, PRO, size)
            admitted.append(name)

        await publish("quiet", "q0", 1024)  # the replica is shared: the caps hold
        admission.release("quiet", 1024)
        admitted.clear()
        flood = [asyncio.create_task(publish("flood", f"f{i}", BATCH)) for i in range(8)]
        await asyncio.sleep(0)
        assert admitted == ["f0", "f1", "f2"]  # three batches fit; five wait
        assert admission.waiting("flood") == 5
        await publish("quiet", "q", 1024)  # never waits for the flood
        assert admitted[-1] == "q"
        admission.release("flood", BATCH)  # f0 answered: the next batch, in arrival order
        await asyncio.sleep(0)
        assert admitted[-1] == "f3" and admission.waiting("flood") == 4
        flood[5].cancel()  # a client that gave up while waiting loses its place, nothing else
        await asyncio.sleep(0)
        for _ in range(3):
            admission.release("flood", BATCH)
        await asyncio.gather(*flood, return_exceptions=True)
        assert admitted == ["f0", "f1", "f2", "q", "f3", "f4", "f6", "f7"]
        assert admission.inflight("flood") == 3 * BATCH and admission.waiting("flood") == 0

    asyncio.run(scenario())


def test_an_organisation_with_nothing_in_the_works_is_admitted_however_large() -> None:
    async def scenario() -> None:
        admission = OrgAdmission(bytes_per_weight=1024)
        await asyncio.wait_for(admission.acquire("big", 1, 10 * 1024 * 1024), 1)
        assert admission.inflight("big") == 10 * 1024 * 1024
        admission.release("big", 10 * 1024 * 1024)
        assert admission.inflight("big") == 0

    asyncio.run(scenario())


def test_a_request_counts_its_body_and_at_least_its_own_cost() -> None:
    assert request_bytes(b"102400") == 102_400
    assert request_bytes(b"3") == MIN_REQUEST_BYTES
    assert request_bytes(None) == request_bytes(b"not a number") > MIN_REQUEST_BYTES


def test_an_organisation_alone_on_the_replica_is_not_held() -> None:
    now = [100.0]

    async def scenario() -> None:
        admission = OrgAdmission(bytes_per_weight=32 * 1024, clock=lambda: now[0])
        for _ in range(8):  # nobody else published: all of it at once
            await asyncio.wait_for(admission.acquire("flood", PRO, BATCH), 1)
        await admission.acquire("quiet", PRO, 1024)
        admission.release("quiet", 1024)
        held = asyncio.create_task(admission.acquire("flood", PRO, BATCH))
        await asyncio.sleep(0)
        assert not held.done()  # another organisation published a moment ago
        now[0] += SHARED_FOR_S + 0.1  # it has been quiet since: the flood has the replica again
        admission.release("flood", BATCH)
        await asyncio.wait_for(held, 1)
        assert admission.inflight("flood") == 8 * BATCH

    asyncio.run(scenario())
