"""SIGTERM drain for a ``queuecore serve`` worker: fail readiness first, stop serving later.

uvicorn's own SIGTERM handler stops taking connections at once. This wraps it: on SIGTERM the
replica is marked draining (``/readyz`` 503 "draining") and keeps serving for
``QUEUECORE_SHUTDOWN_DRAIN_S`` so load balancers take it out, then uvicorn's graceful shutdown
runs (in-flight requests finish, the lifespan flushes the writer), bounded by
``QUEUECORE_SHUTDOWN_TIMEOUT_S`` (docs/shutdown.md).
"""

from __future__ import annotations

import asyncio
import signal
from types import FrameType
from typing import Any

from litestar import Litestar

from control_plane.health import start_draining
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
            previous(sig, frame)  # a second SIGTERM: stop now
            return
        start_draining(app)
        data_plane = app.state.get("data_plane")
        if data_plane is not None:
            data_plane.draining = True  # open streams end with a reconnect hint
        loop.call_soon_threadsafe(_later, loop, drain_s, previous, sig)

    signal.signal(signal.SIGTERM, on_sigterm)


def _later(loop: asyncio.AbstractEventLoop, delay_s: float, handler: Any, sig: int) -> None:
    loop.call_later(delay_s, handler, sig, None)
