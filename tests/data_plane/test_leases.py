"""Range leases, sans-IO: ack ids round-trip, bitmaps, and the renderer's message ids."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from control_plane.api.consume import Renderer
from data_plane.delivery import GroupRef
from data_plane.delivery.leases import (
    RangeBits,
    group_by_lease,
    new_lease_id,
    parse_range_ack,
    range_ack_ids,
)
from data_plane.write.publish import message_id

sizes = st.integers(min_value=1, max_value=2000)


@given(sizes, st.data())
def test_every_range_ack_id_names_its_lease_and_offset(size: int, data: st.DataObject) -> None:
    lease_id = new_lease_id()
    ack_ids = range_ack_ids(lease_id, size)
    assert len(set(ack_ids)) == size
    assert all(a.startswith("ack_") for a in ack_ids)
    delta = data.draw(st.integers(0, size - 1))
    assert parse_range_ack(ack_ids[delta]) == (lease_id, delta)


def test_per_message_ack_ids_and_garbage_are_not_range_ids() -> None:
    per_message = "ack_" + "A" * 24
    assert parse_range_ack(per_message) is None
    assert parse_range_ack("ack_" + "a" * 16 + "!!!") is None
    assert parse_range_ack("") is None
    ranged, plain = group_by_lease([per_message, "nonsense", *range_ack_ids("L" * 16, 3)])
    assert plain == [per_message, "nonsense"]
    assert [d for _, d in ranged["L" * 16]] == [0, 1, 2]


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 49)), min_size=1, max_size=20))
def test_grouping_agrees_with_parsing_one_by_one(picks: list[tuple[int, int]]) -> None:
    leases = {n: new_lease_id() for n, _ in picks}
    wanted = [range_ack_ids(leases[n], 50)[d] for n, d in picks]
    ranged, plain = group_by_lease(wanted)
    assert plain == []
    regrouped = {(lease, d) for lease, items in ranged.items() for _, d in items}
    assert regrouped == {parse_range_ack(a) for a in wanted}
    assert sorted(a for items in ranged.values() for a, _ in items) == sorted(wanted)


@given(sizes, st.data())
def test_bits_round_trip_and_count_what_is_open(size: int, data: st.DataObject) -> None:
    acked = data.draw(st.sets(st.integers(0, size - 1)))
    handed = data.draw(st.sets(st.integers(0, size - 1))) - acked
    bits = RangeBits.from_text("0" * size, "0" * size).with_acked(acked).with_handed_over(handed)
    again = RangeBits.from_text(bits.acked_text, bits.done_text)
    assert again == bits
    assert len(bits.done_text) == size
    assert bits.open_count == size - len(acked | handed)
    assert bits.open_deltas() == sorted(set(range(size)) - acked - handed)
    assert all(bits.is_acked(d) and bits.is_done(d) for d in acked)
    assert all(not bits.is_acked(d) and bits.is_done(d) for d in handed)


@given(st.integers(0, 4095), st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=50))
def test_rendered_message_ids_are_the_publish_paths_ids(partition: int, offsets: list[int]) -> None:
    ref = GroupRef("grp_x", "g", "top_abcdefghijklmnop", "t", True, 30.0, 1000, 5, 1000, 1)
    renderer = Renderer(ref)
    around = [o + d for o in offsets for d in (-1, 0, 1) if 0 <= o + d < 2**63]
    for offset in [*around, 0, 3843, 3844, 3845]:
        assert renderer.message_id(partition, offset) == message_id(ref.topic_id, partition, offset)
