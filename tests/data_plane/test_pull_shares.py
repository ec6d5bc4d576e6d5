"""The delivery shares' order: which organisation's waiting pull gets a freed slot."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from core import settings
from core.db import async_pool
from core.object_store import S3ObjectStore
from core.settings import DatabaseSettings, DataPlaneSettings
from data_plane.delivery.shares import PullShares
from data_plane.groups import service as groups
from data_plane.service import DataPlane, Scope
from data_plane.write.writer import TopicTarget
from tests.data_plane.test_delivery_triage import SlowGets
from tests.data_plane.test_triage import AT_ONCE, new_target, one
from tests.support.services import Services

Pull = tuple[DataPlane, Scope, str, str, str]  # what a pull needs


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(5):
        await asyncio.sleep(0)


def waiter(shares: PullShares, org: str, granted: list[str]) -> asyncio.Task[None]:
    """A pull that waits for a slot, notes its grant and keeps the slot (released by the test)."""

    async def run() -> None:
        await shares.acquire(org)
        granted.append(org)

    return asyncio.get_running_loop().create_task(run())


def passer(shares: PullShares, org: str, granted: list[str]) -> asyncio.Task[None]:
    """A pull that waits for a slot, notes its grant and gives the slot back at once."""

    async def run() -> None:
        await shares.acquire(org)
        granted.append(org)
        shares.release(org)

    return asyncio.get_running_loop().create_task(run())


def test_an_uncontended_pull_takes_its_slot_without_waiting() -> None:
    async def test() -> None:
        shares = PullShares(2)
        step = shares.acquire("a").__await__()
        with pytest.raises(StopIteration):  # done at its first step: no suspension, no switch
            next(step)
        assert (shares.free, shares.held("a")) == (1, 1)
        shares.release("a")
        assert shares.free == 2

    asyncio.run(test())


@pytest.mark.parametrize("weight_a", [1, 10])
def test_a_later_organisation_is_served_ahead_of_another_ones_backlog(weight_a: int) -> None:
    async def test() -> None:
        shares = PullShares(1, weight_of={"a": weight_a, "b": 1}.__getitem__)
        await shares.acquire("a")
        granted: list[str] = []
        tasks = [passer(shares, "a", granted) for _ in range(5)]
        await settle()
        tasks.append(passer(shares, "b", granted))
        await settle()
        assert (shares.waiting("a"), shares.waiting("b")) == (5, 1)
        shares.release("a")
        await asyncio.gather(*tasks)
        # In arrival order b would be sixth; by round robin it is second.
        assert granted == ["a", "b", "a", "a", "a", "a"]
        assert shares.free == 1

    asyncio.run(test())


def test_weights_ten_to_one_give_ten_grants_to_one_under_contention() -> None:
    async def test() -> None:
        shares = PullShares(1, weight_of={"pro": 10, "dev": 1}.__getitem__)
        await shares.acquire("pro")
        granted: list[str] = []
        tasks = [passer(shares, org, granted) for org in ("dev", "pro") for _ in range(40)]
        await settle()
        shares.release("pro")
        await asyncio.gather(*tasks)
        first = granted[:44]  # while both still wait
        assert (first.count("pro"), first.count("dev")) == (40, 4)
        assert granted[:12] == ["dev"] + ["pro"] * 10 + ["dev"]

    asyncio.run(test())


def test_an_organisation_holds_at_most_its_cap_while_another_waits() -> None:
    async def test() -> None:
        shares = PullShares(4, cap=2)
        for _ in range(4):
            await shares.acquire("a")  # alone: it may take every slot
        granted: list[str] = []
        tasks = [waiter(shares, "a", granted) for _ in range(3)]
        tasks += [waiter(shares, "b", granted) for _ in range(2)]
        await settle()
        shares.release("a")  # a holds 3, over its cap: b's
        await settle()
        shares.release("a")  # a holds 2, its cap: b's again
        await settle()
        assert granted == ["b", "b"]
        shares.release("b")  # b waits no more: a is alone, uncapped
        await settle()
        shares.release("b")
        await settle()
        assert granted == ["b", "b", "a", "a"]
        assert (shares.held("a"), shares.held("b"), shares.free) == (4, 0, 0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert shares.waiting("a") == 0

    asyncio.run(test())


def test_a_pull_cancelled_while_waiting_leaves_no_waiter_behind() -> None:
    async def test() -> None:
        shares = PullShares(1)
        await shares.acquire("a")
        granted: list[str] = []
        gone = waiter(shares, "b", granted)
        later = waiter(shares, "c", granted)
        await settle()
        gone.cancel()  # the client went away
        await settle()
        assert (shares.waiting("b"), shares.waiting("c")) == (0, 1)
        shares.release("a")
        await later
        assert granted == ["c"]
        shares.release("c")
        assert shares.free == 1 and gone.cancelled()

    asyncio.run(test())


def test_a_pull_cancelled_as_its_slot_is_granted_passes_the_slot_on() -> None:
    async def test() -> None:
        shares = PullShares(1)
        await shares.acquire("a")
        granted: list[str] = []
        unlucky = waiter(shares, "b", granted)
        later = waiter(shares, "c", granted)
        await settle()
        shares.release("a")  # granted to b ...
        unlucky.cancel()  # ... whose request ends before it runs again
        await settle()
        assert unlucky.cancelled()
        assert granted == ["c"] and shares.held("b") == 0
        await later
        shares.release("c")
        assert shares.free == 1

    asyncio.run(test())


def test_a_pull_out_of_patience_gives_up_with_a_timeout_and_frees_its_place() -> None:
    async def test() -> None:
        shares = PullShares(1, patience_s=lambda: 0.05)
        await shares.acquire("a")
        with pytest.raises(TimeoutError):
            await shares.acquire("b")
        assert shares.waiting("b") == 0
        shares.release("a")
        assert shares.free == 1
        await shares.acquire("b")  # a free slot, taken at once

    asyncio.run(test())


def test_pulls_in_flight_leave_part_of_the_pool_to_publishes_acks_and_heartbeats() -> None:
    assert [settings.pulls_in_flight(size, {}) for size in (1, 2, 4, 10, 40)] == [1, 1, 3, 7, 30]
    assert settings.pulls_in_flight(10, {"QUEUECORE_DELIVERY_PULLS_IN_FLIGHT": "10"}) == 10
    with pytest.raises(settings.SettingsError, match="QUEUECORE_DELIVERY_PULLS_IN_FLIGHT"):
        settings.pulls_in_flight(10, {"QUEUECORE_DELIVERY_PULLS_IN_FLIGHT": "11"})  # > the pool


# --- through the data plane, on the real PostgreSQL and S3 ---------------------------------------


def test_a_second_organisations_pull_is_served_ahead_of_the_first_ones_backlog(
    services: Services,
) -> None:
    busy, quiet = new_target(services.database_url), new_target(services.database_url)

    async def run() -> list[str]:
        # A pool of 2 hands out connections first come, first served: without the shares the
        # quiet organisation's pull would come last.
        pool = async_pool(DatabaseSettings(services.database_url, 1, 2), "test-pull-shares")
        await pool.open(wait=True)
        objects = S3ObjectStore.from_settings(settings.object_store())
        config = replace(
            DataPlaneSettings.from_env(),
            database_url=services.database_url,
            writer=AT_ONCE,
            read_cache_max_bytes=0,  # every pull reads S3, holding its slot
            pulls_in_flight=1,
        )
        plane = DataPlane(pool, objects, config)
        await plane.start()
        try:
            pulls = [await ready(plane, busy, f"g{i}") for i in range(5)]
            pulls.append(await ready(plane, quiet, "g"))
            for target in (busy, quiet):  # one message for each group
                await plane.writer.write(target, one(0, "m"))
            plane.reader.objects = SlowGets(plane.reader.objects, 0.15)
            done: list[str] = []
            tasks = [asyncio.create_task(pull(done, *args)) for args in pulls[:5]]
            for _ in range(400):  # the first holds the slot, four wait behind it
                if plane.pull_shares.waiting(busy.organisation_id) == 4:
                    break
                await asyncio.sleep(0.005)
            tasks.append(asyncio.create_task(pull(done, *pulls[5])))
            assert await asyncio.gather(*tasks) == [1] * 6
            return done
        finally:
            await plane.close()
            await pool.close()

    done = asyncio.run(run())
    assert done.index(quiet.organisation_id) <= 2, done  # in arrival order it would be last


async def ready(plane: DataPlane, target: TopicTarget, group: str) -> Pull:
    """A member of a new group on ``target`` (its group's route cached by a first pull)."""
    async with plane.db.connection() as conn:
        member = (await groups.join(conn, target.environment_id, target.name, group)).member_id
    caller = Scope(target.organisation_id, target.environment_id)
    assert not (await plane.pull(caller, target.name, group, member, 10)).deliveries
    return plane, caller, target.name, group, member


async def pull(
    done: list[str], plane: DataPlane, caller: Scope, topic: str, group: str, member: str
) -> int:
    """Pull; note the organisation when answered; the count delivered."""
    pulled = await plane.pull(caller, topic, group, member, 10)
    done.append(caller.organisation_id)
    return len(pulled.deliveries)
