"""A ``queuecore serve`` process of a test's own that can be killed and started again."""

from __future__ import annotations

import signal
from pathlib import Path

from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services


class Server:
    """A ``queuecore serve`` process that can be killed and started again on its port."""

    def __init__(self, services: Services, log: Path) -> None:
        self.port, self.log, self.services = free_port_block(), log, services
        self.url = f"http://127.0.0.1:{self.port}"
        self.start()

    def start(self) -> None:
        """Start the process and wait until it is ready."""
        env = {**self.services.env(), "QUEUECORE_HTTP_PORT": str(self.port)}
        self.process = queuecore(["serve", "--workers", "1"], env, self.log)
        wait_for(
            lambda: http_status(f"{self.url}/readyz") == 200,
            60,
            "api ready",
            self.process,
            self.log,
        )

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, open streams just break."""
        stop(self.process, signal.SIGKILL)
