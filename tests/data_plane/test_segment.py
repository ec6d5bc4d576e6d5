"""Segment codec: round trips, ranged reads, and corruption that must never decode silently."""

from __future__ import annotations

import gc
import json
import random
import struct
from collections.abc import Mapping, Sequence

import google_crc32c
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_plane.write.segment import (
    BLOCK_VERSIONS,
    FORMAT_VERSION,
    HEADER_SIZE,
    TRAILER_SIZE,
    BlockRef,
    Message,
    NeedMoreBytes,
    Schedule,
    SegmentBuilder,
    SegmentCorrupt,
    decode_block,
    decode_segment,
    encode_segment,
    read_footer,
)

Blocks = Mapping[tuple[str, int], Sequence[Message]]

# A schedule is never empty: a message without one has None (what the decoder gives back).
schedules_st = st.builds(
    Schedule,
    fairness_key=st.none() | st.text(max_size=20),
    weight=st.integers(0, 2**32 - 1),
    throttle_keys=st.lists(st.text(max_size=12), max_size=8).map(tuple),
).filter(lambda s: s.fairness_key is not None or s.weight or s.throttle_keys)
messages_st = st.builds(
    Message,
    key=st.none() | st.binary(max_size=40),
    headers=st.dictionaries(st.text(max_size=12), st.text(max_size=24), max_size=3),
    value=st.binary(max_size=300),
    timestamp_ms=st.integers(-(2**63), 2**63 - 1),
    encoding=st.sampled_from([0, 0, 0, 1, 2]),  # mostly REST's; a Kafka client's now and then
    # mostly none (REST and Kafka publishes without scheduling), a fair group's now and then
    schedule=st.none() | st.none() | schedules_st,
)
block_keys_st = st.tuples(st.text(max_size=16), st.integers(0, 2**32 - 1))
segments_st = st.dictionaries(
    block_keys_st, st.lists(messages_st, min_size=1, max_size=8), max_size=6
)

SMALL_SEGMENT: dict[tuple[str, int], list[Message]] = {
    ("orders", 0): [
        Message(b"k1", {"trace": "abc"}, b'{"id": 1}', 1_700_000_000_000),
        Message(None, {}, b"", 1_700_000_000_005),
    ],
    ("\u00e9v\u00e9nements-\U0001f680", 7): [Message(b"", {"a": "\u00fc"}, b"[]", -1)],
}


def slice_of(data: bytes, ref: BlockRef) -> bytes:
    """The bytes a ranged GET of ``ref`` returns."""
    return data[ref.offset : ref.offset + ref.length]


def flipped(data: bytes, position: int, mask: int) -> bytes:
    """``data`` with one byte changed."""
    changed = bytearray(data)
    changed[position] ^= mask
    return bytes(changed)


def reseal_block(block: bytes) -> bytes:
    """Recompute a block's leading CRC32C, as a (newer or buggy) writer would have."""
    return struct.pack("<I", google_crc32c.value(block[4:])) + block[4:]


def as_lists(blocks: Blocks) -> dict[tuple[str, int], list[Message]]:
    """The mapping decode_segment should return for ``blocks``."""
    return {key: list(messages) for key, messages in blocks.items() if messages}


def assert_all_detected(data: bytes, refs: list[BlockRef], position: int, mask: int) -> None:
    """A changed byte fails the whole-object decode and the ranged read that covers it."""
    corrupt = flipped(data, position, mask)
    with pytest.raises(SegmentCorrupt):
        decode_segment(corrupt)
    for ref in refs:
        if ref.offset <= position < ref.offset + ref.length:
            with pytest.raises(SegmentCorrupt):
                decode_block(slice_of(corrupt, ref))
    footer_size = len(data) - (refs[-1].offset + refs[-1].length if refs else HEADER_SIZE)
    if position >= len(data) - footer_size:
        with pytest.raises(SegmentCorrupt):
            read_footer(corrupt[-footer_size:], len(data))


# --- round trips ------------------------------------------------------------------------------


@given(segments_st)
def test_any_segment_round_trips(blocks: Blocks) -> None:
    data, refs = encode_segment(blocks)

    assert decode_segment(data) == as_lists(blocks)
    assert [(ref.topic_id, ref.partition) for ref in refs] == sorted(blocks)


@given(segments_st)
def test_each_block_decodes_alone_from_its_range(blocks: Blocks) -> None:
    data, refs = encode_segment(blocks)

    for ref in refs:
        topic_id, partition, messages = decode_block(slice_of(data, ref))
        assert (topic_id, partition) == (ref.topic_id, ref.partition)
        assert messages == list(blocks[(topic_id, partition)])
        assert ref.count == len(messages)
        assert ref.min_timestamp_ms == min(m.timestamp_ms for m in messages)
        assert ref.max_timestamp_ms == max(m.timestamp_ms for m in messages)


@given(segments_st, st.data())
def test_builder_appends_batches_in_order(blocks: Blocks, data: st.DataObject) -> None:
    builder = SegmentBuilder()
    for (topic_id, partition), messages in blocks.items():
        cut = data.draw(st.integers(0, len(messages)))
        builder.add(topic_id, partition, messages[:cut])
        builder.add(topic_id, partition, messages[cut:])

    assert builder.build() == encode_segment(blocks)


def test_header_order_and_none_keys_survive() -> None:
    headers = {"z": "1", "a": "2", "\u4e2d": "\u6587"}
    data, _ = encode_segment({("t", 0): [Message(None, headers, b"v", 0)]})

    (decoded,) = decode_segment(data)[("t", 0)]

    assert decoded.key is None
    assert list(decoded.headers.items()) == list(headers.items())


def test_large_values_round_trip() -> None:
    rng = random.Random(7)
    big = [Message(b"k", {}, rng.randbytes(2_000_000), i) for i in range(3)]
    data, _ = encode_segment({("big", 1): big, ("small", 0): big[:1]})

    assert decode_segment(data) == {("big", 1): big, ("small", 0): big[:1]}


def test_empty_blocks_are_omitted_and_empty_segment_decodes() -> None:
    data, refs = encode_segment({("t", 0): []})

    assert refs == []
    assert decode_segment(data) == {}
    assert read_footer(data, len(data)) == []


def test_similar_json_messages_compress_well() -> None:
    rng = random.Random(42)
    messages = [Message(None, {}, json_message(rng, i), 1_700_000_000_000 + i) for i in range(1000)]
    raw_bytes = sum(len(m.value) for m in messages)

    data, _ = encode_segment({("events", 0): messages})

    assert raw_bytes >= 1000 * 1000
    assert len(data) < raw_bytes / 5


def json_message(rng: random.Random, number: int) -> bytes:
    """A ~1 KiB JSON event of the kind a tenant publishes."""
    event = {
        "event_id": f"evt-{number:08d}",
        "user_id": rng.randrange(10_000),
        "type": rng.choice(["click", "view", "purchase"]),
        "amount": round(rng.random() * 100, 2),
        "tags": [rng.choice(["a", "b", "c", "d"]) for _ in range(20)],
    }
    event["padding"] = "lorem ipsum dolor sit amet " * 30
    return json.dumps(event).encode()


def test_out_of_range_partition_is_refused() -> None:
    with pytest.raises(ValueError, match="partition"):
        SegmentBuilder().add("t", 2**32, [Message(None, {}, b"", 0)])


# --- footer reads -----------------------------------------------------------------------------


@given(segments_st, st.data())
def test_footer_reads_from_any_tail_size(blocks: Blocks, data: st.DataObject) -> None:
    segment, refs = encode_segment(blocks)
    tail_size = data.draw(st.integers(TRAILER_SIZE, len(segment)))

    try:
        assert read_footer(segment[-tail_size:], len(segment)) == refs
    except NeedMoreBytes as short:
        assert tail_size < short.required <= len(segment)
        with pytest.raises(NeedMoreBytes):
            read_footer(segment[-(short.required - 1) :], len(segment))
        assert read_footer(segment[-short.required :], len(segment)) == refs


def test_tail_shorter_than_trailer_asks_for_the_trailer() -> None:
    data, _ = encode_segment(SMALL_SEGMENT)

    with pytest.raises(NeedMoreBytes) as short:
        read_footer(data[-5:], len(data))

    assert short.value.required == TRAILER_SIZE


def test_footer_needs_exactly_index_plus_trailer() -> None:
    data, refs = encode_segment(SMALL_SEGMENT)
    footer_size = len(data) - (refs[-1].offset + refs[-1].length)

    with pytest.raises(NeedMoreBytes) as short:
        read_footer(data[-TRAILER_SIZE:], len(data))

    assert short.value.required == footer_size
    assert read_footer(data[-footer_size:], len(data)) == refs


# --- corruption -------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_flipped_byte_of_a_small_segment_is_detected(mask: int) -> None:
    data, refs = encode_segment(SMALL_SEGMENT)

    for position in range(len(data)):
        assert_all_detected(data, refs, position, mask)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(segments_st.filter(bool), st.data())
def test_a_flipped_byte_anywhere_is_detected(blocks: Blocks, data: st.DataObject) -> None:
    segment, refs = encode_segment(blocks)
    position = data.draw(st.integers(0, len(segment) - 1))
    mask = data.draw(st.integers(1, 255))

    assert_all_detected(segment, refs, position, mask)


def test_every_truncation_is_detected() -> None:
    data, refs = encode_segment(SMALL_SEGMENT)

    for size in range(len(data)):
        with pytest.raises(SegmentCorrupt):
            decode_segment(data[:size])
    for ref in refs:
        block = slice_of(data, ref)
        for size in range(len(block)):
            with pytest.raises(SegmentCorrupt):
                decode_block(block[:size])
            with pytest.raises(SegmentCorrupt):
                decode_block(block[len(block) - size :])


def test_trailing_bytes_are_detected() -> None:
    data, refs = encode_segment(SMALL_SEGMENT)

    with pytest.raises(SegmentCorrupt, match="trailer magic"):
        decode_segment(data + b"\0")
    with pytest.raises(SegmentCorrupt, match="length mismatch"):
        decode_block(slice_of(data, refs[0]) + b"\0")


def test_not_a_segment_says_so() -> None:
    with pytest.raises(SegmentCorrupt, match="bad header magic"):
        decode_segment(b"PK\x03\x04" + bytes(100))


def test_newer_segment_version_is_named_in_the_error() -> None:
    data, _ = encode_segment(SMALL_SEGMENT)
    newer = data[:4] + struct.pack("<H", FORMAT_VERSION + 1) + data[6:]

    with pytest.raises(
        SegmentCorrupt, match=f"unsupported segment format version {FORMAT_VERSION + 1}"
    ):
        decode_segment(newer)


def test_newer_trailer_version_is_named_in_the_error() -> None:
    data, _ = encode_segment(SMALL_SEGMENT)
    trailer = bytearray(data[-TRAILER_SIZE:])
    trailer[16:18] = struct.pack("<H", FORMAT_VERSION + 1)
    trailer[20:24] = struct.pack("<I", google_crc32c.value(bytes(trailer[:20])))

    with pytest.raises(SegmentCorrupt, match="unsupported segment format version"):
        read_footer(bytes(trailer), len(data))


def test_newer_block_version_is_named_in_the_error() -> None:
    data, refs = encode_segment(SMALL_SEGMENT)
    block = slice_of(data, refs[0])
    newer = reseal_block(block[:4] + struct.pack("<H", max(BLOCK_VERSIONS) + 1) + block[6:])

    with pytest.raises(SegmentCorrupt, match="unsupported block format version"):
        decode_block(newer)


@pytest.mark.parametrize(
    ("write_content_size", "error"),
    [(True, "frame declares 67108864 bytes"), (False, "does not decompress")],
)
def test_zstd_bomb_is_refused(write_content_size: bool, error: str) -> None:
    data, refs = encode_segment({("t", 0): [Message(None, {}, b"x", 0)]})
    block = slice_of(data, refs[0])
    head_size, topic_size = 24, 1
    bomb = zstandard.ZstdCompressor(write_content_size=write_content_size).compress(
        bytes(64 * 1024 * 1024)
    )
    forged = bytearray(block[: head_size + topic_size] + bomb)
    forged[20:24] = struct.pack("<I", len(bomb))

    with pytest.raises(SegmentCorrupt, match=error):
        decode_block(reseal_block(bytes(forged)))


def test_decoded_messages_are_invisible_to_the_cycle_collector() -> None:
    # The read cache holds hundreds of thousands of messages; tracked ones made every full
    # collection walk them all (60-110 ms pauses in a warm API process).
    data, _ = encode_segment({("t", 0): [Message(b"k", {"h": "v"}, b'"v"', 1)] * 3})
    assert not any(gc.is_tracked(m) for m in decode_segment(data)[("t", 0)])


def test_rest_only_blocks_keep_format_1_and_kafka_encodings_use_format_2() -> None:
    rest = [Message(b"k", {"h": "v"}, b'{"a":1}', 5)]
    kafka = [*rest, Message(None, {}, b'"AAE="', 6, encoding=1), Message(None, {}, b"null", 7, 2)]
    plain, _ = encode_segment({("t", 0): rest})
    mixed, _ = encode_segment({("t", 0): kafka})
    assert plain[HEADER_SIZE + 4] == 1  # block version, little-endian u16 after the crc
    assert mixed[HEADER_SIZE + 4] == 2
    assert decode_segment(mixed)[("t", 0)] == kafka
    assert [m.encoding for m in decode_segment(plain)[("t", 0)]] == [0]


def test_scheduled_messages_use_format_3_and_other_blocks_keep_their_bytes() -> None:
    rest = [Message(b"k", {"h": "v"}, b'{"a":1}', 5)]
    fair = [
        *rest,
        Message(None, {}, b"2", 6, schedule=Schedule("tenant-a", 0, ("api", "eu"))),
        Message(None, {"x": "y"}, b"3", 7, 1, Schedule(None, 3)),
        Message(None, {}, b"4", 8, schedule=Schedule("", 0, ())),
    ]
    before, _ = encode_segment({("t", 0): rest})
    together, _ = encode_segment({("t", 0): rest, ("t", 1): fair})
    assert together[HEADER_SIZE + 4] == 1, "the block without schedules is format 1, as before"
    assert before[: HEADER_SIZE + 40] == together[: HEADER_SIZE + 40]
    decoded = decode_segment(together)
    assert decoded[("t", 1)] == fair
    assert decoded[("t", 1)][3].schedule == Schedule("", 0, ())  # the key "" is a key
    assert decoded[("t", 0)][0].schedule is None


# A segment with one format-2 block, as the codec wrote it before schedules existed.
BEFORE_SCHEDULES = bytes.fromhex(
    "51435347010000002ba19f790200010000000000020000003c000000330000007428b52ffd203c5501"
    "00c80500060001000000ffffffff0000016b31224141453d22687607002000c80316370dac580e061e"
    "00160100000001000000000008000000000000004c0000000200000005000000000000000600000000"
    "0000007454000000000000002b000000d14c07230100000078c3076351435347"
)


def test_a_segment_written_before_format_3_still_reads() -> None:
    assert decode_segment(BEFORE_SCHEDULES) == {
        ("t", 0): [Message(b"k", {"h": "v"}, b"1", 5), Message(None, {}, b'"AAE="', 6, 1)]
    }
    assert encode_segment(decode_segment(BEFORE_SCHEDULES))[0] == BEFORE_SCHEDULES


@given(st.lists(messages_st, min_size=1, max_size=8), st.data())
def test_a_corrupt_scheduling_column_is_detected(
    messages: list[Message], data: st.DataObject
) -> None:
    blocks = {("t", 0): [*messages, Message(None, {}, b"1", 0, schedule=Schedule("k", 1, ("a",)))]}
    encoded, refs = encode_segment(blocks)
    position = data.draw(st.integers(HEADER_SIZE, refs[0].offset + refs[0].length - 1))
    with pytest.raises(SegmentCorrupt):
        decode_block(
            flipped(encoded, position, data.draw(st.integers(1, 255)))[
                refs[0].offset : refs[0].offset + refs[0].length
            ]
        )
