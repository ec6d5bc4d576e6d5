"""A minimal Server-Sent Events reader: lines in, ``(event, data)`` pairs out (sans-IO)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``(event type, data)`` per event; comments (keep-alives) and ids are skipped."""
    kind = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)
    if data:
        yield kind, "\n".join(data)
