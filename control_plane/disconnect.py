"""Work whose client has gone is abandoned: a handler's awaitable is cancelled on disconnect.

Neither the ASGI server nor Litestar cancels a handler when its client disconnects, so a publish
whose client gave up (its own timeout, say, during a stall) would still be written. The request's
body is read before the handler runs; after that the only message ``receive`` can bring is
``http.disconnect``, which cancels the work (the writer then drops the publish if no flush took it
yet, see ``data_plane.write.writer``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from litestar import Request

from core.errors import ClientError

T = TypeVar("T")


class ClientDisconnected(ClientError):
    """The client closed the connection before its answer was ready; the work was abandoned."""

    code = "CLIENT_DISCONNECTED"

    def __init__(self) -> None:
        super().__init__("The client disconnected before the answer was ready; nothing was done.")


async def unless_disconnected(request: Request[Any, Any, Any], work: Awaitable[T]) -> T:
    """``await work``, cancelled if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request.receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if task.cancelled():
            raise ClientDisconnected()
        return task.result()  # it finished as the client left
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


async def _disconnected(receive: Callable[[], Awaitable[Any]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
