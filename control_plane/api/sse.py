"""Server-Sent Events framed by hand: one write per pulled batch, not one per message.

Litestar's ``ServerSentEvent`` builds, regex-splits and sends every event on its own; a stream
delivering a batch of a hundred messages made a hundred ASGI sends and socket writes. Our event
data is single-line JSON (msgspec escapes line breaks inside strings), so a batch is framed with
plain byte formatting and sent as one body chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence
from typing import Any

import msgspec
from litestar.response import Stream

SEPARATOR = b"\r\n"
_encode = msgspec.json.Encoder().encode


class EventStream(Stream):
    """A ``text/event-stream`` response whose body chunks are already framed events."""

    def __init__(self, content: AsyncIterable[bytes]) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={
                "Cache-Control": "no-cache",
                "Connection": "keep-alive",
                "X-Accel-Buffering": "no",
            },
        )


def events(kind: str, items: Sequence[tuple[str, Any]]) -> bytes:
    """One event of type ``kind`` per ``(id, data)``; ``data`` is encoded as JSON."""
    head = b"id: %s" + SEPARATOR + b"event: " + kind.encode() + SEPARATOR + b"data: %s"
    frame = head + SEPARATOR + SEPARATOR
    return b"".join([frame % (event_id.encode(), _encode(data)) for event_id, data in items])


def event(kind: str, data: Any) -> bytes:
    """One event without an id."""
    return b"event: %s%sdata: %s%s%s" % (
        kind.encode(),
        SEPARATOR,
        _encode(data),
        SEPARATOR,
        SEPARATOR,
    )


def comment(text: str) -> bytes:
    """A comment line: ignored by clients, keeps idle connections open."""
    return b": " + text.encode() + SEPARATOR + SEPARATOR


def retry_field(delay_ms: int) -> bytes:
    """A ``retry:`` field alone: how long an EventSource waits before it reconnects."""
    return b"retry: %d" % delay_ms + SEPARATOR + SEPARATOR
