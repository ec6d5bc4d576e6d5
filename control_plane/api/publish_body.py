"""Publish bodies read in one pass, each message's ``data`` kept as the bytes it came as.

A publish body is decoded straight into the request Structs with ``data`` as ``msgspec.Raw``,
and those bytes are what the segment stores: the payload is never decoded into Python objects
and encoded again. What is stored is the value as sent without whitespace outside strings:
escapes and number spellings stay as written (``"\\u00e9"`` stays escaped, ``1.0`` stays
``1.0``, an integer past 64 bits keeps every digit), so a consumer decodes the very JSON value
the producer sent, and size limits and usage count exactly the stored bytes.

A body is taken this way only when it keeps every rule of the general path (``edge/bodies.py``
and the request Structs): valid UTF-8, numbers in range, no key twice in any object, known
fields of the right types. Anything else (a repeated or escaped key, invalid JSON, a wrong
field) reads as None here, so the request goes the general way and is answered exactly as
before. A message whose ``data`` is a string, number, boolean or null (the common case) is not
decoded at all; an object or array is decoded once to look for a repeated key.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec

from control_plane.edge.bodies import repeated_key
from data_plane.service import BatchPublishRequest, PublishRequest

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_Shape = dict[str, msgspec.Raw]  # an object's members, each value undecoded
S = TypeVar("S")


class _RawMessage(PublishRequest, forbid_unknown_fields=True):
    """:class:`PublishRequest` with ``data`` undecoded."""

    data: msgspec.Raw


class _RawBatch(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """:class:`BatchPublishRequest` with each ``data`` undecoded."""

    messages: Annotated[list[_RawMessage], msgspec.Meta(min_length=1)]


_MESSAGE_SHAPE = msgspec.json.Decoder(_Shape)
_BATCH_SHAPE = msgspec.json.Decoder(dict[str, list[_Shape]])
# Lax, as the general path converts (Litestar's signature model).
_MESSAGE = msgspec.json.Decoder(_RawMessage, strict=False)
_BATCH = msgspec.json.Decoder(_RawBatch, strict=False)


def publish_body(body: bytes) -> PublishRequest | None:
    """``POST …/messages``: the request, or None for the general path (see the module)."""
    read = _compacted(body, _MESSAGE_SHAPE)
    if read is None:
        return None
    body, shape = read
    if shape.keys() == {"data"}:
        value = _value(shape["data"])
        return None if value is None else PublishRequest(value)
    try:
        return _message(_MESSAGE.decode(body))
    except msgspec.ValidationError:
        return None


def batch_body(body: bytes) -> BatchPublishRequest | None:
    """``POST …/messages/batch``: the request, or None for the general path (see the module)."""
    read = _compacted(body, _BATCH_SHAPE)
    if read is None:
        return None
    body, shape = read
    items = shape.get("messages")
    if shape.keys() == {"messages"} and items and all(m.keys() == {"data"} for m in items):
        messages = []
        for item in items:
            value = _value(item["data"])
            if value is None:
                return None
            messages.append(PublishRequest(value))
        return BatchPublishRequest(messages)
    try:
        raw = _BATCH.decode(body)
    except msgspec.ValidationError:
        return None
    checked = [_message(m) for m in raw.messages]
    return None if None in checked else BatchPublishRequest([m for m in checked if m])


def _compacted(body: bytes, shape: msgspec.json.Decoder[S]) -> tuple[bytes, S] | None:
    """The body without whitespace and its shape, when it is valid UTF-8 JSON whose keys are
    written plainly and none repeats (re-encoding the shape gives the body back); else None."""
    try:
        if not body.isascii():
            body.decode()  # strings kept undecoded are UTF-8 too
        found = shape.decode(body)
        if _encode(found) != body:
            body = msgspec.json.format(body, indent=-1)
            found = shape.decode(body)
            if _encode(found) != body:
                return None
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    return body, found


def _message(raw: _RawMessage) -> PublishRequest | None:
    value = _value(raw.data)
    if value is None:
        return None
    return PublishRequest(
        value, raw.key, raw.headers, raw.idempotency_key, raw.fairness_key, raw.throttle_keys
    )


def _value(raw: msgspec.Raw) -> msgspec.Raw | None:
    """``data`` as its own bytes without whitespace, or None when the general path would refuse
    it: an object with a key twice, a number out of range, a bad escape."""
    value = bytes(raw)  # no longer a view of the whole body
    first = value[:1]
    if first == b'"' and b"\\" not in value:
        return msgspec.Raw(value)  # a plain string: the body's UTF-8 check covered it
    try:
        decoded = _decode(value)
    except msgspec.DecodeError:
        return None
    if first not in (b"{", b"["):
        return msgspec.Raw(value)  # a scalar's bytes hold no whitespace
    try:
        plain = _encode(decoded) == value  # compact, and no key was dropped as repeated
    except (TypeError, ValueError, OverflowError):
        plain = False
    if not plain:
        value = msgspec.json.format(value, indent=-1)
        if repeated_key(value, decoded) is not None:
            return None
    return msgspec.Raw(value)
