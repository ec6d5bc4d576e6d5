"""The delivery shares' order: which organisation's waiting pull gets a freed slot."""

from __future__ import annotations

import asyncio

import pytest

from data_plane.delivery.shares import PullShares


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


def test_a_later_organisation_is_served_ahead_of_another_ones_backlog() -> None:
    async def test() -> None:
        shares = PullShares(1)
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
