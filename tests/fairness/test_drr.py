"""Deficit round robin, sans-IO: weights, quanta, carried deficits, throttled turns."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from data_plane.delivery.drr import Fairness, KeyState, Pending, Round, play


def pending(*keys: str) -> list[Pending]:
    return [Pending(offset, key) for offset, key in enumerate(keys)]


def test_equal_weights_alternate_and_keep_offset_order_within_a_key() -> None:
    played = play(pending(*"aaaabb"), {}, Fairness(), 10)
    assert [p.offset for p in played.picked] == [0, 4, 1, 5, 2, 3]
    assert played.state() == {}, "every key drained: nothing carried over"


def test_weights_and_quantum_set_each_turn() -> None:
    played = play(pending(*("a" * 20 + "b" * 20)), {}, Fairness({"a": 3}, 1, 2), 16)
    assert "".join(p.key for p in played.picked) == "aaaaaabb" * 2


def test_a_turn_cut_by_the_budget_continues_in_the_next_pull() -> None:
    fairness = Fairness({"a": 3})
    first = play(pending(*("a" * 10 + "b" * 10)), {}, fairness, 2)
    assert [p.key for p in first.picked] == ["a", "a"]
    assert first.state() == {"a": KeyState(1, 0), "b": KeyState(0, 1)}
    rest = pending(*("a" * 10 + "b" * 10))[2:]
    second = play(rest, first.state(), fairness, 5)
    assert [p.key for p in second.picked] == ["a", "b", "a", "a", "a"]


def test_a_throttled_key_sends_nothing_more_in_the_pull_and_keeps_its_place() -> None:
    round_ = Round(pending(*"aaabbb"), {}, Fairness(), 10)
    order = []
    while (turn := round_.next_turn()) is not None:
        key, items = turn
        admitted = 0 if key == "a" else len(items)
        round_.granted(admitted)
        order.append((key, admitted))
    assert [p.key for p in round_.picked] == ["b", "b", "b"]
    assert round_.state() == {"a": KeyState(1, 0)}, "a keeps its deficit, no second top-up"


@given(
    st.lists(st.sampled_from("abcd"), max_size=200),
    st.dictionaries(st.sampled_from("abcd"), st.integers(1, 5)),
    st.integers(1, 3),
    st.lists(st.integers(1, 30), min_size=1, max_size=8),
)
def test_pulls_in_turn_deliver_each_message_once_in_key_order_and_by_weight(
    keys: list[str], weights: dict[str, int], quantum: int, budgets: list[int]
) -> None:
    fairness = Fairness(weights, 1, quantum)
    left = pending(*keys)
    state: dict[str, KeyState] = {}
    delivered: list[Pending] = []
    for budget in budgets * 40:
        played = play(left, state, fairness, budget)
        delivered += played.picked
        state = played.state()
        taken = {p.offset for p in played.picked}
        left = [p for p in left if p.offset not in taken]
    assert sorted(p.offset for p in delivered) == list(range(len(keys)))
    for key in "abcd":
        offsets = [p.offset for p in delivered if p.key == key]
        assert offsets == sorted(offsets)
    # While every key still has messages, each gets its share within one round of the others.
    backlogged = min(Counter(keys).values(), default=0) if len(set(keys)) == 4 else 0
    prefix = Counter(p.key for p in delivered[:backlogged])
    for key, count in prefix.items():
        share = weights.get(key, 1) * quantum
        assert count <= share * (backlogged // sum(weights.get(k, 1) * quantum for k in "abcd") + 2)
