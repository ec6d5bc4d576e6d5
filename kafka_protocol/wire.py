"""Framing and message types of the Kafka protocol (sans-IO): request headers in, responses out.

The message types of every API and version are ``kio``'s dataclasses, generated from Kafka's own
schema files; this module picks the class of a request's API key and version, reads a request's
header and body, and writes a response with the header its version wants. :func:`entity` builds
a response of any version from keyword values, keeping only the fields that version has, so a
handler writes one answer for all the versions it serves.
"""

from __future__ import annotations

import datetime
import functools
import io
import struct
import sys
from dataclasses import dataclass, fields
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

_KEY_VERSION = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
API_VERSIONS_KEY = 18
METADATA_KEY = 3
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True, slots=True)
class RequestHead:
    """The parts of a request every handler needs: which API, which version, who asks."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str


def peek(frame: bytes) -> tuple[int, int, int]:
    """API key, version and correlation id of a request frame, without parsing the rest."""
    if len(frame) < _KEY_VERSION.size:
        raise ValueError(f"a request of {len(frame)} bytes has no header")
    api_key, version, correlation_id = _KEY_VERSION.unpack_from(frame)
    return api_key, version, correlation_id


@functools.cache
def request_type(api_key: int, version: int) -> type[Any]:
    """The ``kio`` class of a request."""
    return load_request_schema(api_key, version)


@functools.cache
def response_type(api_key: int, version: int) -> type[Any]:
    """The ``kio`` class of a response."""
    return load_response_schema(api_key, version)


def read_request(frame: bytes, api_key: int, version: int) -> tuple[RequestHead, Any]:
    """The header and the body of a request frame."""
    cls = request_type(api_key, version)
    header, used = _reader(cls.__header_schema__)(frame, 0)
    head = RequestHead(api_key, version, header.correlation_id, header.client_id or "")
    try:
        body, _ = _reader(cls)(frame, used)
    except KeyError:
        # A tagged field this version does not define (librdkafka sends one with some
        # Metadata requests): the protocol says to skip it, which kio's reader does not do.
        if api_key != METADATA_KEY or not cls.__flexible__:
            raise
        body = _lenient_metadata(frame, used)
    return head, body


def _lenient_metadata(frame: bytes, position: int) -> Any:
    """A flexible Metadata request's topic names (null: all), read by hand."""
    count, position = _uvarint(frame, position)
    if count == 0:
        return _MetadataTopics(None)
    names = []
    for _ in range(count - 1):
        length, position = _uvarint(frame, position)
        names.append(_TopicName(frame[position : position + length - 1].decode()))
        position += length - 1
        tags, position = _uvarint(frame, position)
        for _ in range(tags):
            _, position = _uvarint(frame, position)
            size, position = _uvarint(frame, position)
            position += size
    return _MetadataTopics(tuple(names))


@dataclass(frozen=True, slots=True)
class _TopicName:
    name: str


@dataclass(frozen=True, slots=True)
class _MetadataTopics:
    topics: tuple[_TopicName, ...] | None


def _uvarint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def write_response(head: RequestHead, response: Any) -> bytes:
    """The response frame (size prefix included) answering ``head``."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(struct.pack(">i", head.correlation_id))
    # Flexible responses carry a tagged-field section in their header, except ApiVersions,
    # whose response header stays v0 so a client that sent too new a version can still read it.
    if type(response).__flexible__ and head.api_key != API_VERSIONS_KEY:
        out.write(b"\0")
    _writer(type(response))(out, response)
    frame = out.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


_READERS: dict[type[Any], Any] = {}
_WRITERS: dict[type[Any], Any] = {}
_FIELDS: dict[type[Any], dict[str, str]] = {}


def _reader(cls: type[Any]) -> Any:
    found = _READERS.get(cls)
    if found is None:
        found = _READERS[cls] = entity_reader(cls)
    return found


def _writer(cls: type[Any]) -> Any:
    found = _WRITERS.get(cls)
    if found is None:
        found = _WRITERS[cls] = entity_writer(cls)
    return found


# --- building responses -----------------------------------------------------------------------


def _fields(cls: type[Any]) -> dict[str, str]:
    """Per field of a message class: its Kafka type."""
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = {f.name: f.metadata.get("kafka_type", "") for f in fields(cls)}
    return found


def entity(cls: type[Any], **values: Any) -> Any:
    """An instance of ``cls`` from the values it has fields for (durations and times in ms)."""
    known = _fields(cls)
    kept: dict[str, Any] = {}
    for name, value in values.items():
        kafka_type = known.get(name)
        if kafka_type is None:
            continue
        kept[name] = _convert(kafka_type, value)
    return cls(**kept)


def _convert(kafka_type: str, value: Any) -> Any:
    if kafka_type.startswith("timedelta") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type.startswith("datetime") and isinstance(value, int):
        return None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)
    if kafka_type == "error_code" and isinstance(value, int):
        return ErrorCode(value)
    return value


def nested(cls: type[Any], name: str) -> type[Any]:
    """The class ``name`` of the same API version as ``cls`` (a nested entity)."""
    found: type[Any] = getattr(sys.modules[cls.__module__], name)
    return found


def has_field(cls: type[Any], name: str) -> bool:
    """Whether this version of a message has the field."""
    return name in _fields(cls)


def millis(value: Any) -> int:
    """A ``kio`` duration (timedelta) or plain number as whole milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)
