"""The record-batch codecs Kafka clients use: gzip, snappy (raw or xerial-framed), lz4 (frame
format) and zstd, with decompression bounded so a small batch cannot expand without limit."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
import zstandard

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEAD = 16  # magic, version, compatible version
_CHUNK = struct.Struct(">i")


class CompressionError(ValueError):
    """The payload does not decompress with its declared codec, or expands past the bound."""


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` as Kafka clients expect to read it."""
    if codec == GZIP:
        return zlib.compress(data, 6, wbits=31)
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise CompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes, max_bytes: int) -> bytes:
    """The records part of a batch, at most ``max_bytes`` long once decompressed."""
    try:
        out = _decompress(codec, data, max_bytes)
    except CompressionError:
        raise
    except Exception as exc:  # each library raises its own types for a corrupt payload
        name = NAMES.get(codec, str(codec))
        raise CompressionError(f"{name} payload does not decompress: {exc}") from exc
    if len(out) > max_bytes:
        raise CompressionError(f"records decompress to more than {max_bytes} bytes")
    return out


def _decompress(codec: int, data: bytes, max_bytes: int) -> bytes:
    if codec == GZIP:
        inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
        out = inflater.decompress(data, max_bytes + 1)
        if not inflater.eof and len(out) <= max_bytes:
            raise CompressionError("gzip payload is truncated")
        return out
    if codec == SNAPPY:
        return _snappy(data, max_bytes)
    if codec == LZ4:
        return _lz4(data, max_bytes)
    if codec == ZSTD:
        return _bounded(cramjam.zstd.decompress_into, data, max_bytes)
    raise CompressionError(f"unknown compression codec {codec}")


def _snappy(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_raw(data, max_bytes)
    chunks = []
    position = _XERIAL_HEAD
    total = 0
    while position < len(data):  # xerial framing: (length i32, raw snappy block)*
        if position + 4 > len(data):
            raise CompressionError("xerial snappy framing is truncated")
        (length,) = _CHUNK.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise CompressionError("xerial snappy chunk overruns the payload")
        chunk = _snappy_raw(data[position : position + length], max_bytes - total)
        total += len(chunk)
        chunks.append(chunk)
        position += length
    return b"".join(chunks)


def _snappy_raw(data: bytes, max_bytes: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(data)
    if size > max_bytes:
        raise CompressionError(f"snappy block declares {size} bytes, more than {max_bytes}")
    return bytes(cramjam.snappy.decompress_raw(data))


def _lz4(data: bytes, max_bytes: int) -> bytes:
    return _bounded(cramjam.lz4.decompress_into, data, max_bytes)


def _bounded(decompress_into: Callable[[bytes, bytearray], int], data: bytes, limit: int) -> bytes:
    """Decompress into a buffer that grows (x4) up to ``limit`` + 1 bytes, never past it."""
    size = min(limit + 1, 8 * len(data) + 65536)
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except Exception as exc:
            if "whole buffer" not in str(exc) or size > limit:
                raise
            size = min(limit + 1, size * 4)
            continue
        if written > limit:
            raise CompressionError(f"records decompress to more than {limit} bytes")
        return bytes(out[:written])
