"""SIGTERM drain for a ``queuecore serve`` worker: fail readiness first, stop serving later.

uvicorn's own SIGTERM handler stops taking connections at once. This wraps it: on SIGTERM the
replica is marked draining (``/readyz`` 503 "draining") and keeps serving for
``QUEUECORE_SHUTDOWN_DRAIN_S`` so load balancers take it out, then uvicorn's graceful shutdown
runs (in-flight requests finish, the lifespan flushes the writer), bounded by
``QUEUECORE_SHUTDOWN_TIMEOUT_S`` (docs/shutdown.md). While draining, responses close their
connection; when the shutdown starts, long-polls and streams waiting for messages are woken to
answer at once, so they do not hold it up.
"""

from __future__ import annotations

import asyncio
import signal
from types import FrameType
from typing import Any

from litestar import Litestar
from litestar.types import Message, Scope

from control_plane.edge.health import start_draining
from core import settings


def install_drain_on_sigterm(app: Litestar) -> None:
    """Replace the process's SIGTERM handler by one that drains before calling it."""
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):
        return  # no server handler to defer to (not under uvicorn)
    drain_s = settings.shutdown().drain_s
    loop = asyncio.get_running_loop()

    def on_sigterm(sig: int, frame: FrameType | None) -> None:
        if app.state.get("draining", False):
            loop.call_soon_threadsafe(_stop_serving, app, previous, sig)  # a second one: now
            return
        start_draining(app)
        loop.call_soon_threadsafe(app.before_send.append, close_connection)
        loop.call_soon_threadsafe(loop.call_later, drain_s, _stop_serving, app, previous, sig)

    signal.signal(signal.SIGTERM, on_sigterm)


def _stop_serving(app: Litestar, handler: Any, sig: int) -> None:
    """End the drain: the server's own handler stops it, and what waits for messages answers."""
    handler(sig, None)
    data_plane = app.state.get("data_plane")
    if data_plane is not None:
        data_plane.stop_waiting()


async def close_connection(message: Message, scope: Scope) -> None:
    """``before_send`` hook of a draining replica: ``Connection: close`` on every response, so
    a client's next request opens a connection, which the balancer sends to a ready replica."""
    if message["type"] == "http.response.start":
        headers = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
        message["headers"] = [*headers, (b"connection", b"close")]
