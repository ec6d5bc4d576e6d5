"""The record batch codec (sans-IO): round trips with every codec, corruption and truncation
detected, decompression bounded; and the record <-> message mapping of one topic, two protocols."""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_plane.write.segment import BYTES, JSON, NULL, Message
from kafka_protocol import compression
from kafka_protocol.compression import CompressionError
from kafka_protocol.mapping import InvalidRecord, to_message, to_record
from kafka_protocol.records import (
    CorruptBatch,
    Record,
    decode_batch,
    decode_batches,
    encode_batch,
    varint,
)

LIMIT = 1 << 20
records_st = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=30),
        value=st.none() | st.binary(max_size=300),
        headers=st.lists(
            st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3
        ).map(tuple),
        timestamp_ms=st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=12,
)
codecs_st = st.sampled_from([0, 1, 2, 3, 4])


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(records_st, codecs_st, st.integers(0, 2**40), st.integers(-1, 2**40), st.integers(-1, 2**30))
def test_any_batch_round_trips(
    records: list[Record], codec: int, base: int, producer_id: int, sequence: int
) -> None:
    data = encode_batch(base, records, codec=codec, producer_id=producer_id, base_sequence=sequence)
    (batch,) = decode_batches(data, LIMIT)
    assert batch.records == tuple(records)
    assert (batch.base_offset, batch.compression) == (base, codec)
    assert (batch.producer_id, batch.base_sequence) == (producer_id, sequence)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(records_st, codecs_st, st.data())
def test_a_flipped_byte_is_detected(records: list[Record], codec: int, data: st.DataObject) -> None:
    encoded = bytearray(encode_batch(7, records, codec=codec))
    position = data.draw(st.integers(17, len(encoded) - 1))  # the crc and everything it covers
    encoded[position] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptBatch):
        decode_batch(bytes(encoded), LIMIT)


@settings(max_examples=40)
@given(records_st, st.data())
def test_every_truncation_is_detected(records: list[Record], data: st.DataObject) -> None:
    encoded = encode_batch(0, records)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptBatch):
        decode_batches(encoded[:cut] or b"\0", LIMIT)


def test_several_batches_decode_in_order() -> None:
    first = encode_batch(0, [Record(b"a", b"1")])
    second = encode_batch(1, [Record(None, b"2"), Record(None, None)], codec=compression.ZSTD)
    batches = decode_batches(first + second, LIMIT)
    assert [r.value for b in batches for r in b.records] == [b"1", b"2", None]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_is_bounded(codec: int) -> None:
    bomb = compression.compress(codec, b"\0" * 1_000_000)
    with pytest.raises(CompressionError):
        compression.decompress(codec, bomb, 10_000)
    batch = encode_batch(0, [Record(None, b"\0" * 500_000)], codec=codec)
    with pytest.raises(CorruptBatch, match=r"more than|past|declares|whole buffer"):
        decode_batch(batch, 10_000)


def test_xerial_framed_snappy_is_read() -> None:
    payload = b"records " * 1000
    block = compression.compress(compression.SNAPPY, payload)
    framed = b"\x82SNAPPY\x00" + bytes(8) + len(block).to_bytes(4, "big") + block
    assert compression.decompress(compression.SNAPPY, framed, LIMIT) == payload


def test_old_message_formats_are_refused() -> None:
    data = bytearray(encode_batch(0, [Record(None, b"x")]))
    data[16] = 1  # magic
    with pytest.raises(CorruptBatch, match="format 1"):
        decode_batch(bytes(data), LIMIT)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varints_round_trip(value: int) -> None:
    from kafka_protocol.records import _read_varint

    assert _read_varint(varint(value), 0) == (value, len(varint(value)))


# --- one topic, two protocols ------------------------------------------------------------------


def test_a_json_value_is_stored_as_it_came() -> None:
    message = to_message(Record(b"k", b'{"a": [1, 2]}', (("h", b"v"),)), 5)
    assert message == Message(b"k", {"h": "v"}, b'{"a": [1, 2]}', 5, JSON)
    assert to_record(message) == Record(b"k", b'{"a": [1, 2]}', (("h", b"v"),), 5)


@given(st.binary(min_size=1, max_size=200))
def test_any_value_round_trips_and_is_json_for_rest(value: bytes) -> None:
    import msgspec

    message = to_message(Record(None, value), 1)
    msgspec.json.decode(message.value)  # every stored value is JSON, whatever came in
    assert to_record(message).value == value
    if message.encoding == BYTES:
        assert message.value == b'"' + base64.b64encode(value) + b'"'


def test_a_null_value_is_a_null_for_both() -> None:
    message = to_message(Record(b"k", None), 1)
    assert (message.value, message.encoding) == (b"null", NULL)
    assert to_record(message).value is None


def test_invalid_utf8_inside_a_json_string_is_not_json() -> None:
    assert to_message(Record(None, b'"\xff"'), 1).encoding == BYTES


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ((("h", None),), "null value"),
        ((("h", b"\xff"),), "not UTF-8"),
        ((("h", b"a"), ("h", b"b")), "twice"),
        ((("h", b"a\x00"),), "NUL"),
    ],
)
def test_headers_rest_cannot_hold_are_refused(headers: tuple, reason: str) -> None:
    with pytest.raises(InvalidRecord, match=reason):
        to_message(Record(None, b"1", headers), 1)
