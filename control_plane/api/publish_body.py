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
before. A ``data`` string (the common case) is not decoded; a number, boolean or null is
decoded to check its range; an object or array is decoded once to look for a repeated key.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec

from control_plane.edge.bodies import repeated_key
from data_plane.service import BatchPublishRequest, PublishRequest

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_Shape = dict[str, msgspec.Raw]  # an object's members, each value undecoded
_S = TypeVar("_S")


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
    body, shape, escapes = read
    if len(shape) == 1 and "data" in shape:
        value = _value(shape["data"], escapes)
        return None if value is None else PublishRequest(value)
    try:
        return _message(_MESSAGE.decode(body), escapes)
    except msgspec.ValidationError:
        return None


def batch_body(body: bytes) -> BatchPublishRequest | None:
    """``POST …/messages/batch``: the request, or None for the general path (see the module)."""
    read = _compacted(body, _BATCH_SHAPE)
    if read is None:
        return None
    body, shape, escapes = read
    items = shape.get("messages")
    if len(shape) == 1 and items and all(len(m) == 1 and "data" in m for m in items):
        count = len(items)
        values = (_value(item["data"], escapes) for item in items)
        messages = [PublishRequest(value) for value in values if value is not None]
    else:
        try:
            raw = _BATCH.decode(body)
        except msgspec.ValidationError:
            return None
        count = len(raw.messages)
        read_all = (_message(message, escapes) for message in raw.messages)
        messages = [message for message in read_all if message is not None]
    return BatchPublishRequest(messages) if len(messages) == count else None


def _compacted(body: bytes, shape: msgspec.json.Decoder[_S]) -> tuple[bytes, _S, bool] | None:
    """The body without whitespace, its shape and whether it has escapes, when it is valid UTF-8
    JSON whose keys are written plainly and none repeats (re-encoding the shape gives the body
    back); else None."""
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
    return body, found, b"\\" in body


def _message(raw: _RawMessage, escapes: bool) -> PublishRequest | None:
    value = _value(raw.data, escapes)
    if value is None:
        return None
    return PublishRequest(
        value, raw.key, raw.headers, raw.idempotency_key, raw.fairness_key, raw.throttle_keys
    )


def _value(raw: msgspec.Raw, escapes: bool) -> msgspec.Raw | None:
    """``data`` without whitespace, or None when the general path would refuse it: an object
    with a key twice, a number out of range. A string is decoded only when the body has escapes
    (decoding checks them as the skipping did; this is belt and braces for a rare case)."""
    value = bytes(raw)  # its own bytes, no longer a view of the whole body
    first = value[:1]
    if first == b'"' and not escapes:
        return msgspec.Raw(value)  # the body's UTF-8 check covered it
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
