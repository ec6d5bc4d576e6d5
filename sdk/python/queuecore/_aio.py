"""Small asyncio helpers of the consumer."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from typing import Any, Callable

STOPPED = object()  # what a wait interrupted by stop() gives instead of a result
END = object()  # the end of a stream


async def next_chunk(chunks: AsyncIterator[str]) -> Any:
    """The next chunk, or :data:`END`."""
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return END


async def call(callback: Callable[..., Any], *args: Any) -> Any:
    """Call a plain function or a coroutine function alike."""
    result = callback(*args)
    if inspect.isawaitable(result):
        return await result
    return result


async def wait_for_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``event``; whether it is set."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        return False
    return True
