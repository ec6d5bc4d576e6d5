"""A real ``queuecore pusher`` and a real HTTP receiver for the push tests, tenants, and the
REST calls they make (through the in-process API)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.support.processes import queuecore, stop, wait_for
from tests.support.push_receiver import Receiver
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

PUSHER_ENV = {
    "QUEUECORE_PUSHER_REFRESH_MS": "200",  # a new push group is picked up within 0.2 s
    "QUEUECORE_PUSHER_SESSION_TIMEOUT_MS": "3000",  # a killed pusher is evicted within 3 s
    "QUEUECORE_USAGE_FLUSH_S": "1",
}


def start_pusher(
    services: Services, log: Path, extra: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A ``queuecore pusher`` on the session's services, started."""
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = queuecore(["pusher"], {**services.env(), **PUSHER_ENV, **(extra or {})}, log)
    wait_for(lambda: "pusher_started" in log.read_text(errors="replace"), 60, "pusher", proc, log)
    return proc


@pytest.fixture(scope="module")
def pusher(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One pusher for the module; yields its log."""
    log = tmp_path_factory.mktemp("pusher") / "pusher.log"
    proc = start_pusher(services, log)
    yield log
    stop(proc)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    made.start()
    yield made
    made.stop()


@pytest.fixture(scope="module")
def org(services: Services) -> NewOrganisation:
    return new_organisation(services.database_url, tier="pro")


@dataclass
class Api:
    """REST calls of one organisation's production key."""

    client: TestClient
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.key)

    def topic(self, name: str, partitions: int = 1, delivery: str = "exactly-once") -> str:
        body = {"name": name, "partitions": partitions, "delivery": delivery}
        answer = self.client.post("/v1/topics", json=body, headers=self.headers)
        assert answer.status_code == 201, answer.text
        return name

    def push_group(self, topic: str, group: str, push: dict[str, Any], **config: Any) -> str:
        """Configure a push group (from the earliest offset); its signing secret."""
        body = {"startFrom": "earliest", **config, "push": push}
        answer = self.client.put(
            f"/v1/topics/{topic}/groups/{group}", json=body, headers=self.headers
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["pushSecret"])

    def publish(
        self, topic: str, data: Any, key: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        body = {"data": data, **({"key": key} if key is not None else {}), **extra}
        answer = self.client.post(f"/v1/topics/{topic}/messages", json=body, headers=self.headers)
        assert answer.status_code == 201, answer.text
        return dict(answer.json())

    def dead_letters(self, topic: str, group: str) -> dict[str, Any]:
        answer = self.client.get(f"/v1/topics/{topic}/groups/{group}/dlq", headers=self.headers)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def group(self, topic: str, group: str) -> dict[str, Any]:
        answer = self.client.get(f"/v1/topics/{topic}/groups/{group}", headers=self.headers)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def lag(self, topic: str, group: str) -> int:
        return sum(p["lag"] for p in self.group(topic, group)["partitions"])


@pytest.fixture(scope="module")
def api(client: TestClient, org: NewOrganisation) -> Api:
    return Api(client, org.keys["production"].secret)


def eventually(check: Callable[[], bool], timeout_s: float = 20, what: str = "") -> None:
    """Poll ``check`` until it holds."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.05)
