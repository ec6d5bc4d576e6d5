"""Sans-IO codec of Kafka record batches (message format v2, "magic 2"): bytes in, bytes out.

A produce request carries, per partition, a run of record batches; a fetch response carries the
same. Layout of one batch (big-endian; varints are zig-zag, as in protobuf)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 (2) | crc u32
    | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64
    | producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records

``crc`` is CRC32C over everything after it. ``attributes``: bits 0-2 the compression of the
records part (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 the timestamp type, bit 4
transactional, bit 5 control batch. A record::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value
    | headerCount varint | (keyLength varint | key utf-8 | valueLength varint | value)*

A length of -1 is null (a null key, a null value: a tombstone).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import google_crc32c

from kafka_protocol import compression
from kafka_protocol.compression import CompressionError

MAGIC = 2
_HEAD = struct.Struct(">qiibIhiqqqhii")  # everything up to and including recordCount
HEAD_SIZE = _HEAD.size  # 61
_LENGTH_END = 12  # baseOffset + batchLength: batchLength counts the bytes after it
_CRC_END = 21  # the CRC covers the bytes from here (attributes) to the batch's end
COMPRESSION_MASK = 0x07
TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class CorruptBatch(ValueError):
    """The bytes are not a valid record batch; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a client sees it: key and value bytes (or None), headers in order."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A decoded batch: its producer identity (for idempotence) and its records."""

    base_offset: int
    records: tuple[Record, ...]
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    attributes: int = 0
    partition_leader_epoch: int = -1

    @property
    def compression(self) -> int:
        """The codec of the records part (0 none … 4 zstd)."""
        return self.attributes & COMPRESSION_MASK

    @property
    def transactional(self) -> bool:
        """Whether the batch belongs to a transaction (not supported here)."""
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def control(self) -> bool:
        """Whether the batch holds control records (transaction markers)."""
        return bool(self.attributes & CONTROL)

    @property
    def last_sequence(self) -> int:
        """The sequence number of the batch's last record."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + len(self.records) - 1) & 0x7FFF_FFFF


# --- varints ------------------------------------------------------------------------------------


def _read_varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    """A zig-zag varint at ``position``: (value, position after it)."""
    shift = 0
    raw = 0
    while True:
        try:
            byte = data[position]
        except IndexError:
            raise CorruptBatch("truncated varint") from None
        position += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
        if shift > 63:
            raise CorruptBatch("varint longer than 10 bytes")


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    raw &= 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


_SMALL_VARINTS = [_varint(n) for n in range(-1, 16384)]


def varint(value: int) -> bytes:
    """The zig-zag varint encoding of ``value`` (small values from a table)."""
    if -1 <= value < 16383:
        return _SMALL_VARINTS[value + 1]
    return _varint(value)


# --- decoding -----------------------------------------------------------------------------------


def decode_batches(data: bytes, max_records_bytes: int) -> list[RecordBatch]:
    """Every batch of a partition's record set; a trailing partial batch is an error.

    ``max_records_bytes`` bounds what one batch's records may decompress to.
    """
    batches = []
    position = 0
    view = memoryview(data)
    while position < len(data):
        if len(data) - position < _LENGTH_END:
            raise CorruptBatch(f"{len(data) - position} trailing bytes are not a batch")
        (length,) = struct.unpack_from(">i", data, position + 8)
        end = position + _LENGTH_END + length
        if length < HEAD_SIZE - _LENGTH_END or end > len(data):
            raise CorruptBatch(f"batch length {length} does not fit the {len(data)}-byte set")
        batches.append(decode_batch(view[position:end], max_records_bytes))
        position = end
    return batches


def decode_batch(data: bytes | memoryview, max_records_bytes: int) -> RecordBatch:
    """One whole batch: framing, checksum, decompression, records."""
    if len(data) < HEAD_SIZE:
        raise CorruptBatch(f"a batch has at least {HEAD_SIZE} bytes, got {len(data)}")
    (
        base_offset,
        length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_delta,
        base_timestamp,
        _max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise CorruptBatch(f"message format {magic} is not supported (only v2)")
    if length != len(data) - _LENGTH_END:
        raise CorruptBatch(f"batch length {length} != {len(data) - _LENGTH_END}")
    if google_crc32c.value(bytes(data[_CRC_END:])) != crc:
        raise CorruptBatch("batch checksum (CRC32C) mismatch")
    if count < 0 or (last_delta != count - 1 and count > 0):
        raise CorruptBatch(f"{count} records but last offset delta {last_delta}")
    body = bytes(data[HEAD_SIZE:])
    codec = attributes & COMPRESSION_MASK
    if codec:
        try:
            body = compression.decompress(codec, body, max_records_bytes)
        except CompressionError as exc:
            raise CorruptBatch(str(exc)) from exc
    records = _decode_records(body, count, base_timestamp)
    return RecordBatch(
        base_offset,
        records,
        producer_id,
        producer_epoch,
        base_sequence,
        attributes,
        leader_epoch,
    )


def _decode_records(body: bytes, count: int, base_timestamp: int) -> tuple[Record, ...]:
    records = []
    position = 0
    for expected_delta in range(count):
        length, position = _read_varint(body, position)
        end = position + length
        if length < 1 or end > len(body):
            raise CorruptBatch(f"record length {length} overruns the batch")
        record, used, delta = _decode_record(body, position + 1, base_timestamp)
        if used != end:
            raise CorruptBatch(f"record declares {length} bytes but holds {used - position}")
        if delta != expected_delta:
            raise CorruptBatch(f"record offset delta {delta}, expected {expected_delta}")
        records.append(record)
        position = end
    if position != len(body):
        raise CorruptBatch(f"{len(body) - position} bytes after the last record")
    return tuple(records)


def _decode_record(body: bytes, position: int, base_timestamp: int) -> tuple[Record, int, int]:
    timestamp_delta, position = _read_varint(body, position)
    offset_delta, position = _read_varint(body, position)
    key, position = _read_bytes(body, position)
    value, position = _read_bytes(body, position)
    header_count, position = _read_varint(body, position)
    if header_count < 0 or header_count > len(body):
        raise CorruptBatch(f"header count {header_count}")
    headers = []
    for _ in range(header_count):
        name, position = _read_bytes(body, position)
        if name is None:
            raise CorruptBatch("a header has a null name")
        header_value, position = _read_bytes(body, position)
        try:
            headers.append((name.decode(), header_value))
        except UnicodeDecodeError:
            raise CorruptBatch("a header name is not UTF-8") from None
    record = Record(key, value, tuple(headers), base_timestamp + timestamp_delta)
    return record, position, offset_delta


def _read_bytes(body: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = _read_varint(body, position)
    if length < 0:
        if length != -1:
            raise CorruptBatch(f"negative length {length}")
        return None, position
    end = position + length
    if end > len(body):
        raise CorruptBatch(f"a {length}-byte field overruns the record")
    return body[position:end], end


# --- encoding -----------------------------------------------------------------------------------


def encode_batch(
    base_offset: int,
    records: Sequence[Record],
    *,
    codec: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    leader_epoch: int = 0,
) -> bytes:
    """One batch holding ``records`` at offsets ``base_offset, base_offset + 1, …``."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    base_timestamp = records[0].timestamp_ms
    max_timestamp = max(record.timestamp_ms for record in records)
    body = b"".join(
        _encode_record(delta, record, base_timestamp) for delta, record in enumerate(records)
    )
    if codec:
        body = compression.compress(codec, body)
    attributes = codec & COMPRESSION_MASK
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        len(records) - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    crc = google_crc32c.extend(google_crc32c.value(tail), body)
    length = 4 + 1 + 4 + len(tail) + len(body)  # leader epoch, magic, crc, the rest
    head = struct.pack(">qiibI", base_offset, length, leader_epoch, MAGIC, crc)
    return b"".join((head, tail, body))


def _encode_record(offset_delta: int, record: Record, base_timestamp: int) -> bytes:
    parts = [
        b"\x00",
        varint(record.timestamp_ms - base_timestamp),
        varint(offset_delta),
        *_field(record.key),
        *_field(record.value),
        varint(len(record.headers)),
    ]
    for name, value in record.headers:
        parts += _field(name.encode())
        parts += _field(value)
    body = b"".join(parts)
    return varint(len(body)) + body


def _field(value: bytes | None) -> tuple[bytes, ...]:
    if value is None:
        return (_SMALL_VARINTS[0],)
    return varint(len(value)), value
