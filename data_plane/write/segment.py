"""Sans-IO codec for segment objects: bytes in, bytes out, no I/O.

A segment object holds one zstd-compressed block per (topic_id, partition), written once per
flush by the group-commit writer. Offsets are not stored: the block index row in PostgreSQL
carries each block's base offset, and a block's messages take consecutive offsets from it.

Layout (all integers little-endian)::

    header   "QCSG" | version u16 | reserved u16 (0)                            8 bytes
    block*   crc32c u32 | version u16 | topic_len u16 | partition u32 | count u32
             | raw_len u32 | compressed_len u32 | topic utf-8 | zstd frame
    index    block_count u32, then per block: topic_len u16 | partition u32 | offset u64
             | length u32 | count u32 | min_timestamp_ms i64 | max_timestamp_ms i64 | topic
    trailer  index_offset u64 | index_length u32 | index_crc32c u32 | version u16
             | reserved u16 (0) | trailer_crc32c u32 | "QCSG"                  28 bytes

A block's crc32c covers every byte of the block after the crc field, so a block fetched alone by
a ranged GET is verified and decoded with no other context. The trailer's own crc32c covers its
fields, and its index_crc32c covers the index. Blocks are contiguous, in (topic_id, partition)
order, between the header and the index; the reader checks that geometry exactly.

The uncompressed block payload is columnar, which is fast to build in Python and compresses well:
``count`` timestamps (i64), key lengths (i32, -1 for no key), value lengths (u32), header counts
(u32), the lengths of all header names and values (u32), then the key bytes, the value bytes and
the UTF-8 header names and values.

Block format 2 adds one column after the header field lengths: each message's ``encoding`` (u8,
see :class:`Message`). A block whose messages all have encoding 0 (every REST publish) is written
in format 1, byte for byte as before, and both formats are read.

Block format 3 adds a message's scheduling metadata (:class:`Schedule`: fairness key, weight,
throttle keys) after the encodings column, which it always has: fairness key lengths (i32, -1 for
none), weights (u32, 0 for none), throttle key counts (u32) and the lengths of all throttle keys
(u32); their UTF-8 bytes follow the header names and values. A block is written in format 3 only
when one of its messages has a schedule, so every other block keeps format 1 or 2 byte for byte,
and segments written before format 3 read as they always did.

Headers are ``dict[str, str]`` (insertion order is kept). Checksums are CRC32C (Castagnoli) from
the ``google-crc32c`` package; any single corrupted byte is a burst under 32 bits, which CRC32C
always detects.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise

import google_crc32c
import msgspec
import zstandard

__all__ = [
    "BYTES",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "JSON",
    "NULL",
    "TRAILER_SIZE",
    "BlockRef",
    "Message",
    "NeedMoreBytes",
    "Schedule",
    "SegmentBuilder",
    "SegmentCorrupt",
    "decode_block",
    "decode_segment",
    "encode_segment",
    "read_footer",
]

FORMAT_VERSION = 1
BLOCK_VERSIONS = (1, 2, 3)  # 2: with the encodings column; 3: and scheduling metadata
JSON, BYTES, NULL = 0, 1, 2  # Message.encoding
MAGIC = b"QCSG"
DEFAULT_COMPRESSION_LEVEL = 3

_HEADER = struct.Struct("<4sHH")
_CRC = struct.Struct("<I")
_BLOCK_FIELDS = struct.Struct("<HHIIII")  # version, topic_len, partition, count, raw/zstd len
_BLOCK_HEAD_SIZE = _CRC.size + _BLOCK_FIELDS.size
_INDEX_COUNT = struct.Struct("<I")
_INDEX_ENTRY = struct.Struct("<HIQIIqq")
_TRAILER_FIELDS = struct.Struct("<QIIHH")  # index offset, length, crc, version, reserved
_TRAILER = struct.Struct(f"<{_TRAILER_FIELDS.size}sI4s")

HEADER_SIZE = _HEADER.size
TRAILER_SIZE = _TRAILER.size
_MAX_U16 = 0xFFFF
_MAX_U32 = 0xFFFF_FFFF
_MIN_MESSAGE_BYTES = 20  # one timestamp, key length, value length and header count


class SegmentCorrupt(ValueError):
    """The bytes are not a valid segment or block; the message says what is wrong."""


class NeedMoreBytes(Exception):
    """``read_footer`` needs the last ``required`` bytes of the object to read the index."""

    def __init__(self, required: int) -> None:
        super().__init__(f"need the last {required} bytes of the segment object")
        self.required = required


class Schedule(msgspec.Struct, frozen=True, gc=False):
    """How a fair group schedules a message: its fairness key (``None``: the shared key ``""``),
    its weight (0: the group's) and the throttle keys that must each have a token."""

    fairness_key: str | None = None
    weight: int = 0
    throttle_keys: tuple[str, ...] = ()


class Message(msgspec.Struct, frozen=True, gc=False):
    """One published message; ``value`` is the JSON-encoded payload.

    ``encoding`` says what a Kafka client produced: ``JSON`` (0, also every REST publish) — the
    value as it came; ``BYTES`` (1) — a value that was not JSON, stored as the JSON string of its
    base64, so every reader of ``value`` still gets JSON; ``NULL`` (2) — a null value (a
    tombstone), stored as ``null``.

    A msgspec Struct with ``gc=False``: hundreds of thousands are made per second on the publish
    and read paths (~0.1 us each, against ~0.5 us for a NamedTuple), and the read cache holds
    hundreds of thousands at a time. The garbage collector never untracks tuple subclasses, so
    as NamedTuples every full collection walked all of them (60-110 ms pauses with a warm cache);
    a message holds only bytes, strings and a str-to-str dict, so it can be in no reference cycle.
    """

    key: bytes | None
    headers: dict[str, str]
    value: bytes
    timestamp_ms: int
    encoding: int = JSON
    schedule: Schedule | None = None  # set only when the message has one (block format 3)


@dataclass(frozen=True, slots=True)
class BlockRef:
    """Footer entry: where one (topic_id, partition) block lives in the segment object."""

    topic_id: str
    partition: int
    offset: int
    length: int
    count: int
    min_timestamp_ms: int
    max_timestamp_ms: int


# --- encoding ---------------------------------------------------------------------------------


class SegmentBuilder:
    """Gathers messages per (topic_id, partition) and encodes one segment object.

    Holds a ``ZstdCompressor``, which is not thread-safe: use one builder per thread.
    """

    def __init__(self, compression_level: int = DEFAULT_COMPRESSION_LEVEL) -> None:
        self._compressor = zstandard.ZstdCompressor(level=compression_level)
        self._blocks: dict[tuple[str, int], list[Message]] = {}

    def add(self, topic_id: str, partition: int, messages: Sequence[Message]) -> None:
        """Append ``messages``, in order, to the block of (topic_id, partition)."""
        if not 0 <= partition <= _MAX_U32:
            raise ValueError(f"partition {partition} is outside 0..{_MAX_U32}")
        if len(topic_id.encode()) > _MAX_U16:
            raise ValueError(f"topic_id is longer than {_MAX_U16} UTF-8 bytes")
        self._blocks.setdefault((topic_id, partition), []).extend(messages)

    def build(self) -> tuple[bytes, list[BlockRef]]:
        """Encode the segment; blocks are sorted by (topic_id, partition), empty ones omitted."""
        parts = [_HEADER.pack(MAGIC, FORMAT_VERSION, 0)]
        position = HEADER_SIZE
        refs: list[BlockRef] = []
        for (topic_id, partition), messages in sorted(self._blocks.items()):
            if not messages:
                continue
            block = _encode_block(self._compressor, topic_id, partition, messages)
            refs.append(_block_ref(topic_id, partition, position, len(block), messages))
            parts.append(block)
            position += len(block)
        index = _encode_index(refs)
        parts += [index, _encode_trailer(position, index)]
        return b"".join(parts), refs


def encode_segment(
    blocks: Mapping[tuple[str, int], Sequence[Message]],
    compression_level: int = DEFAULT_COMPRESSION_LEVEL,
) -> tuple[bytes, list[BlockRef]]:
    """Encode a whole segment from ``{(topic_id, partition): messages}``."""
    builder = SegmentBuilder(compression_level)
    for (topic_id, partition), messages in blocks.items():
        builder.add(topic_id, partition, messages)
    return builder.build()


def _block_ref(
    topic_id: str, partition: int, offset: int, length: int, messages: Sequence[Message]
) -> BlockRef:
    timestamps = [m.timestamp_ms for m in messages]
    return BlockRef(
        topic_id, partition, offset, length, len(messages), min(timestamps), max(timestamps)
    )


def _encode_block(
    compressor: zstandard.ZstdCompressor,
    topic_id: str,
    partition: int,
    messages: Sequence[Message],
) -> bytes:
    scheduled = any(m.schedule is not None for m in messages)
    encoded = scheduled or any(m.encoding for m in messages)
    raw = _encode_messages(messages, encoded)
    if scheduled:
        raw = _with_schedules(raw, messages)
    if len(raw) > _MAX_U32 or len(messages) > _MAX_U32:
        raise ValueError(f"block ({topic_id!r}, {partition}) is too large for one segment")
    payload = compressor.compress(raw)
    topic = topic_id.encode()
    version = BLOCK_VERSIONS[2] if scheduled else BLOCK_VERSIONS[1] if encoded else 1
    fields = _BLOCK_FIELDS.pack(
        version, len(topic), partition, len(messages), len(raw), len(payload)
    )
    crc = google_crc32c.extend(google_crc32c.value(fields + topic), payload)
    return b"".join((_CRC.pack(crc), fields, topic, payload))


def _encode_messages(messages: Sequence[Message], encoded: bool = False) -> bytes:
    count = len(messages)
    keys = [m.key for m in messages]
    values = [m.value for m in messages]
    fields = [text.encode() for m in messages for item in m.headers.items() for text in item]
    try:
        columns = (
            struct.pack(f"<{count}q", *[m.timestamp_ms for m in messages]),
            struct.pack(f"<{count}i", *[-1 if key is None else len(key) for key in keys]),
            struct.pack(f"<{count}I", *map(len, values)),
            struct.pack(f"<{count}I", *[len(m.headers) for m in messages]),
            struct.pack(f"<{len(fields)}I", *map(len, fields)),
        )
        encodings = bytes([m.encoding for m in messages]) if encoded else b""
    except (struct.error, ValueError) as exc:
        raise ValueError(f"message field out of range: {exc}") from exc
    return b"".join((*columns, encodings, *[key for key in keys if key], *values, *fields))


def _with_schedules(raw: bytes, messages: Sequence[Message]) -> bytes:
    """Format 3: the scheduling columns after the encodings column, their bytes at the end."""
    count = len(messages)
    fixed = _MIN_MESSAGE_BYTES * count + count  # the four columns and the encodings
    fields = sum(2 * len(m.headers) for m in messages)
    split = fixed + 4 * fields
    schedules = [m.schedule or _NO_SCHEDULE for m in messages]
    fairness = [None if s.fairness_key is None else s.fairness_key.encode() for s in schedules]
    throttles = [key.encode() for s in schedules for key in s.throttle_keys]
    try:
        columns = (
            struct.pack(f"<{count}i", *[-1 if key is None else len(key) for key in fairness]),
            struct.pack(f"<{count}I", *[s.weight for s in schedules]),
            struct.pack(f"<{count}I", *[len(s.throttle_keys) for s in schedules]),
            struct.pack(f"<{len(throttles)}I", *map(len, throttles)),
        )
    except struct.error as exc:
        raise ValueError(f"schedule field out of range: {exc}") from exc
    tail = (*[key for key in fairness if key], *throttles)
    return b"".join((raw[:split], *columns, raw[split:], *tail))


_NO_SCHEDULE = Schedule()


def _encode_index(refs: Sequence[BlockRef]) -> bytes:
    parts = [_INDEX_COUNT.pack(len(refs))]
    for ref in refs:
        topic = ref.topic_id.encode()
        fields = (ref.partition, ref.offset, ref.length, ref.count)
        stamps = (ref.min_timestamp_ms, ref.max_timestamp_ms)
        parts += [_INDEX_ENTRY.pack(len(topic), *fields, *stamps), topic]
    return b"".join(parts)


def _encode_trailer(index_offset: int, index: bytes) -> bytes:
    fields = _TRAILER_FIELDS.pack(
        index_offset, len(index), google_crc32c.value(index), FORMAT_VERSION, 0
    )
    return _TRAILER.pack(fields, google_crc32c.value(fields), MAGIC)


# --- decoding ---------------------------------------------------------------------------------


def decode_segment(data: bytes) -> dict[tuple[str, int], list[Message]]:
    """Decode a whole segment object into ``{(topic_id, partition): messages}``."""
    _check_header(data)
    decompressor = zstandard.ZstdDecompressor()
    decoded: dict[tuple[str, int], list[Message]] = {}
    for number, ref in enumerate(read_footer(data, len(data))):
        where = f"block #{number} ({ref.topic_id!r}, {ref.partition}) at offset {ref.offset}"
        try:
            block = data[ref.offset : ref.offset + ref.length]
            topic_id, partition, messages = _decode_block(block, decompressor)
            _check_matches_ref(ref, topic_id, partition, messages)
        except SegmentCorrupt as exc:
            raise SegmentCorrupt(f"{where}: {exc}") from exc
        decoded[(topic_id, partition)] = messages
    return decoded


def decode_block(data: bytes) -> tuple[str, int, list[Message]]:
    """Verify and decode one block's bytes, as fetched by a ranged GET of a ``BlockRef``."""
    return _decode_block(data, zstandard.ZstdDecompressor())


def read_footer(tail: bytes, object_size: int) -> list[BlockRef]:
    """Read the footer index from the last ``len(tail)`` bytes of an ``object_size``-byte object.

    Raises ``NeedMoreBytes`` when ``tail`` is too short to hold the whole index.
    """
    _check_tail_size(len(tail), object_size)
    index_offset, index_length, index_crc = _read_trailer(tail[-TRAILER_SIZE:], object_size)
    required = TRAILER_SIZE + index_length
    if len(tail) < required:
        raise NeedMoreBytes(required)
    index = tail[len(tail) - required : len(tail) - TRAILER_SIZE]
    if google_crc32c.value(index) != index_crc:
        raise SegmentCorrupt("footer index checksum mismatch")
    refs = _decode_index(index)
    _check_geometry(refs, index_offset)
    return refs


def _check_tail_size(tail_size: int, object_size: int) -> None:
    if tail_size > object_size:
        raise ValueError(f"tail of {tail_size} bytes is longer than the object ({object_size})")
    if object_size < HEADER_SIZE + TRAILER_SIZE:
        raise SegmentCorrupt(
            f"truncated: a segment has at least {HEADER_SIZE + TRAILER_SIZE} bytes, "
            f"this object has {object_size}"
        )
    if tail_size < TRAILER_SIZE:
        raise NeedMoreBytes(TRAILER_SIZE)


def _check_header(data: bytes) -> None:
    if len(data) < HEADER_SIZE:
        raise SegmentCorrupt(f"truncated: {len(data)} bytes is shorter than the segment header")
    magic, version, reserved = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SegmentCorrupt(f"bad header magic {magic!r}, expected {MAGIC!r}: not a segment")
    _check_version("segment", version)
    if reserved != 0:
        raise SegmentCorrupt(f"reserved header field is {reserved}, expected 0")


def _check_version(what: str, version: int) -> None:
    if version != FORMAT_VERSION:
        raise SegmentCorrupt(
            f"unsupported {what} format version {version} (this reader supports "
            f"{FORMAT_VERSION}): written by a newer writer, or corrupt"
        )


def _read_trailer(trailer: bytes, object_size: int) -> tuple[int, int, int]:
    fields, crc, magic = _TRAILER.unpack(trailer)
    if magic != MAGIC:
        raise SegmentCorrupt(f"bad trailer magic {magic!r}: truncated object or not a segment")
    if google_crc32c.value(fields) != crc:
        raise SegmentCorrupt("trailer checksum mismatch")
    index_offset, index_length, index_crc, version, reserved = _TRAILER_FIELDS.unpack(fields)
    _check_version("segment", version)
    if reserved != 0:
        raise SegmentCorrupt(f"reserved trailer field is {reserved}, expected 0")
    if index_offset < HEADER_SIZE or index_offset + index_length + TRAILER_SIZE != object_size:
        raise SegmentCorrupt(
            f"length mismatch: trailer places a {index_length}-byte index at {index_offset}, "
            f"which does not end at the trailer of a {object_size}-byte object (truncated?)"
        )
    return index_offset, index_length, index_crc


def _decode_index(index: bytes) -> list[BlockRef]:
    try:
        (count,) = _INDEX_COUNT.unpack_from(index)
        position = _INDEX_COUNT.size
        refs = []
        for _ in range(count):
            topic_length, *fields = _INDEX_ENTRY.unpack_from(index, position)
            position += _INDEX_ENTRY.size + topic_length
            topic = index[position - topic_length : position].decode()
            refs.append(BlockRef(topic, *fields))
    except (struct.error, UnicodeDecodeError) as exc:
        raise SegmentCorrupt(f"malformed footer index: {exc}") from exc
    if position != len(index):
        raise SegmentCorrupt(f"footer index length mismatch: parsed {position} of {len(index)}")
    return refs


def _check_geometry(refs: Sequence[BlockRef], index_offset: int) -> None:
    """Blocks must tile the bytes between header and index exactly, in sorted key order."""
    position = HEADER_SIZE
    previous: tuple[str, int] | None = None
    for ref in refs:
        key = (ref.topic_id, ref.partition)
        if ref.offset != position or ref.count < 1 or ref.min_timestamp_ms > ref.max_timestamp_ms:
            raise SegmentCorrupt(f"footer entry for {key} is inconsistent: {ref}")
        if previous is not None and key <= previous:
            raise SegmentCorrupt(f"footer entries out of order or duplicated at {key}")
        position, previous = ref.offset + ref.length, key
    if position != index_offset:
        raise SegmentCorrupt(f"blocks end at {position} but the index starts at {index_offset}")


def _check_matches_ref(
    ref: BlockRef, topic_id: str, partition: int, messages: list[Message]
) -> None:
    timestamps = [m.timestamp_ms for m in messages]
    found = (topic_id, partition, len(messages), min(timestamps), max(timestamps))
    expected = (ref.topic_id, ref.partition, ref.count, ref.min_timestamp_ms, ref.max_timestamp_ms)
    if found != expected:
        raise SegmentCorrupt(f"block does not match its footer entry: {found} != {expected}")


def _decode_block(
    data: bytes, decompressor: zstandard.ZstdDecompressor
) -> tuple[str, int, list[Message]]:
    version, partition, count, raw_length, topic_end = _check_block_head(data)
    topic_id = _decode_text(data[_BLOCK_HEAD_SIZE:topic_end], "topic_id")
    raw = _decompress(decompressor, data[topic_end:], raw_length)
    return topic_id, partition, _decode_messages(raw, count, version)


def _check_block_head(data: bytes) -> tuple[int, int, int, int, int]:
    """Verify a block's framing and checksum; return version, partition, count, raw length,
    topic end."""
    if len(data) < _BLOCK_HEAD_SIZE:
        raise SegmentCorrupt(f"truncated block: {len(data)} bytes is shorter than its header")
    (crc,) = _CRC.unpack_from(data)
    version, topic_length, partition, count, raw_length, payload_length = _BLOCK_FIELDS.unpack_from(
        data, _CRC.size
    )
    if version not in BLOCK_VERSIONS:
        raise SegmentCorrupt(
            f"unsupported block format version {version} (this reader supports "
            f"{BLOCK_VERSIONS}): written by a newer writer, or corrupt"
        )
    topic_end = _BLOCK_HEAD_SIZE + topic_length
    if topic_end + payload_length != len(data):
        raise SegmentCorrupt(
            f"block length mismatch: header declares {topic_end + payload_length} bytes, "
            f"got {len(data)} (truncated or corrupt)"
        )
    if google_crc32c.value(data[_CRC.size :]) != crc:
        raise SegmentCorrupt("block checksum mismatch")
    if count < 1 or raw_length < count * _MIN_MESSAGE_BYTES:
        raise SegmentCorrupt(f"block header is inconsistent: {count} messages in {raw_length} B")
    return version, partition, count, raw_length, topic_end


def _decode_text(data: bytes, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise SegmentCorrupt(f"{what} is not valid UTF-8: {exc}") from exc


def _decompress(decompressor: zstandard.ZstdDecompressor, payload: bytes, raw_length: int) -> bytes:
    """Decompress to exactly ``raw_length`` bytes; never allocate more (zstd bomb guard)."""
    try:
        # decompress() ignores max_output_size when the frame declares its content size.
        declared = zstandard.frame_content_size(payload)
        if declared not in (-1, raw_length):
            raise SegmentCorrupt(f"zstd frame declares {declared} bytes, block {raw_length}")
        raw = decompressor.decompress(payload, max_output_size=raw_length, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise SegmentCorrupt(f"block payload does not decompress: {exc}") from exc
    if len(raw) != raw_length:
        raise SegmentCorrupt(f"block decompressed to {len(raw)} bytes, header says {raw_length}")
    return raw


def _decode_messages(raw: bytes, count: int, version: int = 1) -> list[Message]:
    timestamps, key_lengths, value_lengths, header_counts, field_lengths = _unpack_columns(
        raw, count
    )
    position = _MIN_MESSAGE_BYTES * count + 4 * len(field_lengths)
    encodings = b""
    if version >= 2:
        encodings, position = raw[position : position + count], position + count
        if len(encodings) != count or max(encodings) > NULL:
            raise SegmentCorrupt("malformed encodings column in block payload")
    columns: tuple[tuple[int, ...], ...] = ()
    if version >= 3:
        columns, position = _schedule_columns(raw, count, position)
    keys, position = _slice_keys(raw, key_lengths, position)
    values, position = _slice_runs(raw, value_lengths, position)
    fields, position = _slice_runs(raw, field_lengths, position)
    schedules: list[Schedule | None] = []
    if columns:
        schedules, position = _schedules(raw, columns, position)
    if position != len(raw):
        raise SegmentCorrupt(f"block payload length mismatch: used {position} of {len(raw)}")
    headers = _group_headers(fields, header_counts)
    if columns:
        return list(map(Message, keys, headers, values, timestamps, encodings, schedules))
    if encodings:
        return list(map(Message, keys, headers, values, timestamps, encodings))
    return list(map(Message, keys, headers, values, timestamps))


def _schedule_columns(
    raw: bytes, count: int, position: int
) -> tuple[tuple[tuple[int, ...], ...], int]:
    """Format 3's fairness key lengths, weights, throttle key counts and throttle key lengths."""
    try:
        fairness = struct.unpack_from(f"<{count}i", raw, position)
        weights = struct.unpack_from(f"<{count}I", raw, position + 4 * count)
        counts = struct.unpack_from(f"<{count}I", raw, position + 8 * count)
        lengths = struct.unpack_from(f"<{sum(counts)}I", raw, position + 12 * count)
    except struct.error as exc:
        raise SegmentCorrupt(f"malformed scheduling columns: {exc}") from exc
    return (fairness, weights, counts, lengths), position + 12 * count + 4 * len(lengths)


def _schedules(
    raw: bytes, columns: tuple[tuple[int, ...], ...], position: int
) -> tuple[list[Schedule | None], int]:
    """The messages' schedules from format 3's columns and the bytes after the headers."""
    fairness_lengths, weights, counts, throttle_lengths = columns
    fairness, position = _slice_keys(raw, fairness_lengths, position)
    throttles, position = _slice_runs(raw, throttle_lengths, position)
    texts = iter([_decode_text(key, "throttle key") for key in throttles])
    schedules: list[Schedule | None] = []
    for key, weight, many in zip(fairness, weights, counts, strict=True):
        keys = tuple(next(texts) for _ in range(many))
        if key is None and not weight and not keys:
            schedules.append(None)
            continue
        name = None if key is None else _decode_text(key, "fairness key")
        schedules.append(Schedule(name, weight, keys))
    return schedules, position


def _unpack_columns(raw: bytes, count: int) -> tuple[tuple[int, ...], ...]:
    """Timestamps, key lengths, value lengths, header counts, header field lengths."""
    try:
        header_counts = struct.unpack_from(f"<{count}I", raw, 16 * count)
        return (
            struct.unpack_from(f"<{count}q", raw, 0),
            struct.unpack_from(f"<{count}i", raw, 8 * count),
            struct.unpack_from(f"<{count}I", raw, 12 * count),
            header_counts,
            struct.unpack_from(f"<{2 * sum(header_counts)}I", raw, 20 * count),
        )
    except struct.error as exc:
        raise SegmentCorrupt(f"malformed block payload: {exc}") from exc


def _slice_keys(
    raw: bytes, lengths: Sequence[int], position: int
) -> tuple[list[bytes | None], int]:
    keys: list[bytes | None] = []
    for length in lengths:
        if length < 0:
            if length != -1:
                raise SegmentCorrupt(f"negative key length {length}")
            keys.append(None)
        else:
            keys.append(raw[position : position + length])
            position += length
    return keys, position


def _slice_runs(raw: bytes, lengths: Sequence[int], position: int) -> tuple[list[bytes], int]:
    bounds = list(accumulate(lengths, initial=position))
    if bounds[-1] > len(raw):
        raise SegmentCorrupt(f"block payload is truncated: needs {bounds[-1]}, has {len(raw)}")
    return [raw[start:end] for start, end in pairwise(bounds)], bounds[-1]


def _group_headers(fields: list[bytes], counts: Sequence[int]) -> list[dict[str, str]]:
    texts = iter([_decode_text(field, "header") for field in fields])
    headers = []
    for count in counts:
        group = {next(texts): next(texts) for _ in range(count)} if count else {}
        if len(group) != count:
            raise SegmentCorrupt("duplicate header name in block payload")
        headers.append(group)
    return headers
