"""Sticky assignment: one owner per partition, balanced within one, as few moves as possible."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from data_plane.groups.assignment import assign, moved

member_names = st.lists(
    st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=12, unique=True
)
partition_counts = st.integers(min_value=0, max_value=64)


def check_valid(partitions: int, members: list[str], result: dict[str, list[int]]) -> None:
    owned = [p for held in result.values() for p in held]
    assert sorted(owned) == list(range(partitions)), "every partition has exactly one owner"
    assert set(result) == set(members)
    counts = [len(held) for held in result.values()]
    assert max(counts) - min(counts) <= 1


@given(partition_counts, member_names)
def test_fresh_assignment_is_complete_and_balanced(partitions: int, members: list[str]) -> None:
    check_valid(partitions, members, assign(partitions, members))


@given(partition_counts, member_names)
def test_same_inputs_same_assignment_and_no_moves(partitions: int, members: list[str]) -> None:
    first = assign(partitions, members)
    again = assign(partitions, list(reversed(members)), first)
    assert again == first
    assert moved(first, again) == 0


@given(partition_counts, member_names, st.text("xyz", min_size=5, max_size=5))
def test_join_moves_only_what_the_newcomer_takes(
    partitions: int, members: list[str], newcomer: str
) -> None:
    before = assign(partitions, members)
    after = assign(partitions, [*members, newcomer], before)
    check_valid(partitions, [*members, newcomer], after)
    assert moved(before, after) == len(after[newcomer])
    for name in members:
        assert set(after[name]) <= set(before[name])


@given(partition_counts, member_names.filter(lambda m: len(m) >= 2), st.data())
def test_leave_moves_only_the_leavers_partitions(
    partitions: int, members: list[str], data: st.DataObject
) -> None:
    before = assign(partitions, members)
    leaver = data.draw(st.sampled_from(members))
    remaining = [m for m in members if m != leaver]
    after = assign(partitions, remaining, before)
    check_valid(partitions, remaining, after)
    assert moved({m: before[m] for m in remaining}, after) == len(before[leaver])


def test_two_members_split_four_partitions_and_one_takes_all_after_the_other_leaves() -> None:
    both = assign(4, ["m1", "m2"])
    assert sorted(len(v) for v in both.values()) == [2, 2]
    alone = assign(4, ["m1"], both)
    assert alone == {"m1": [0, 1, 2, 3]}
    assert set(both["m1"]) <= set(alone["m1"])


@given(st.integers(1, 32), st.integers(0, 32), member_names)
def test_more_partitions_are_spread_without_moving_existing_ones(
    old: int, added: int, members: list[str]
) -> None:
    before = assign(old, members)
    after = assign(old + added, members, before)
    check_valid(old + added, members, after)
    owner = {p: m for m, held in before.items() for p in held}
    kept = sum(1 for m, held in after.items() for p in held if owner.get(p) == m)
    assert kept >= old - len(members), "at most one partition per member moves to rebalance"


def test_empty_group_owns_nothing() -> None:
    assert assign(3, []) == {}
