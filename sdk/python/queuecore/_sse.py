"""A minimal Server-Sent Events reader: lines in, ``(event, data)`` pairs out (sans-IO)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

Event = tuple[str, str]


class SseParser:
    """Feed it one line at a time; an event comes out at each blank line."""

    def __init__(self) -> None:
        self._kind = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        """The event this line completes, if any; comments (keep-alives) and ids are skipped."""
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._kind = value
        elif name == "data":
            self._data.append(value)
        return None

    def flush(self) -> Event | None:
        """The event collected so far (None when it has no data), and start a new one."""
        event = (self._kind, "\n".join(self._data)) if self._data else None
        self._kind, self._data = "message", []
        return event


class LineSplitter:
    """Feed it text as it arrives; whole lines (without their ``\n`` or ``\r\n``) come out."""

    def __init__(self) -> None:
        self._rest = ""

    def feed(self, text: str) -> list[str]:
        """The lines ``text`` completes."""
        *lines, self._rest = (self._rest + text).split("\n")
        return [line[:-1] if line.endswith("\r") else line for line in lines]


def sse_events(lines: Iterable[str]) -> Iterator[Event]:
    """``(event type, data)`` per event of ``lines``."""
    parser = SseParser()
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event
    last = parser.flush()
    if last is not None:
        yield last


async def aiter_sse_events(lines: AsyncIterable[str]) -> AsyncIterator[Event]:
    """``(event type, data)`` per event of an asynchronous stream of lines."""
    parser = SseParser()
    async for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event
    last = parser.flush()
    if last is not None:
        yield last
