"""One topic, two protocols: a Kafka record and a stored (REST) message, each as the other.

- A REST message is a record whose value is the compact JSON of its ``data`` (stored that way),
  with its key (UTF-8) and headers (values UTF-8).
- A record whose value is valid JSON (UTF-8) is stored as it came: REST shows it as ``data``.
  Any other value is stored as the JSON string of its base64 with encoding ``BYTES`` (REST shows
  ``"encoding": "base64"`` beside it); a null value (a tombstone) as ``null`` with encoding
  ``NULL``. A Kafka consumer gets the bytes (or the null) the producer sent, either way.
- Header values must be UTF-8 text without NUL, names unique (REST headers are a JSON object
  of strings); a record that breaks this is refused, never altered.
- A record's timestamp is its append time (the producer's CreateTime is not kept), as every
  REST message's is.
"""

from __future__ import annotations

import base64
import binascii

import msgspec

from data_plane.service import BYTES, JSON, NULL, Message
from kafka_protocol.records import Record

_RAW = msgspec.json.Decoder(msgspec.Raw)
_NULL_VALUE = b"null"


class InvalidRecord(ValueError):
    """A record that cannot be stored as a message; the message says why."""


def to_message(record: Record, now_ms: int) -> Message:
    """The message a produced record is stored as."""
    headers = _headers(record.headers) if record.headers else {}
    value = record.value
    if value is None:
        return Message(record.key, headers, _NULL_VALUE, now_ms, NULL)
    if _is_json(value):
        return Message(record.key, headers, value, now_ms, JSON)
    encoded = b'"' + base64.b64encode(value) + b'"'
    return Message(record.key, headers, encoded, now_ms, BYTES)


def to_record(message: Message) -> Record:
    """The record a Kafka consumer gets for a stored message."""
    value: bytes | None = message.value
    if message.encoding == BYTES:
        value = _unbase64(message.value)
    elif message.encoding == NULL:
        value = None
    headers = tuple((name, text.encode()) for name, text in message.headers.items())
    return Record(message.key, value, headers, message.timestamp_ms)


def _is_json(value: bytes) -> bool:
    try:
        _RAW.decode(value)
        value.decode()  # the Raw decoder checks the syntax, not the UTF-8 inside strings
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return True


def _headers(pairs: tuple[tuple[str, bytes | None], ...]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in pairs:
        if value is None:
            raise InvalidRecord(f"header '{name}' has a null value (header values are text)")
        try:
            text = value.decode()
        except UnicodeDecodeError:
            raise InvalidRecord(f"header '{name}' is not UTF-8 text") from None
        if "\x00" in name or "\x00" in text:
            raise InvalidRecord(f"header '{name}' holds a NUL character")
        if name in headers:
            raise InvalidRecord(f"header '{name}' appears twice (header names are unique)")
        headers[name] = text
    return headers


def _unbase64(stored: bytes) -> bytes:
    try:
        return base64.b64decode(stored[1:-1], validate=True)
    except binascii.Error:  # never written so: the value is returned as stored
        return stored
