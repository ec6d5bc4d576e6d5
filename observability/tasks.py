"""Worker-level tasks: a health round trip."""

from __future__ import annotations

import os
import socket
import time

from celery import shared_task


@shared_task(name="queuecore.ping")
def ping(token: str) -> dict[str, object]:
    """Echo ``token`` with the worker's identity: proves a broker → worker → backend round trip."""
    return {"token": token, "worker": f"{socket.gethostname()}:{os.getpid()}", "at": time.time()}
