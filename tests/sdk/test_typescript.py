"""The TypeScript SDK (sdk/typescript) against a real ``queuecore serve``: its node test suite,
the shared conformance scenarios, its README examples, and a consumer that outlives a SIGKILL
of its API process.

The package is built once per session (``npm ci`` only when the lock file changed, then
``npm run build``). Under ``CI=true`` a missing or too old node/npm fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tenants.models import NewOrganisation
from tests.support.restartable import Server
from tests.support.services import Services, unavailable
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e

PACKAGE = Path(__file__).resolve().parents[2] / "sdk" / "typescript"
MIN_NODE_MAJOR = 18
NODE_SUITE_TIMEOUT_S = 240
SESSION_TIMEOUT_S = 2  # test/fixtures/consumer.mjs
NODE_FILES = [
    "sse.test.mjs",
    "types.test.mjs",
    "client.test.mjs",
    "retries.test.mjs",
    "conformance.test.mjs",
    "readme.test.mjs",
]


def _node_major(node: str) -> int:
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    return int(version.stdout.strip().lstrip("v").split(".")[0])


def _run(command: list[str], timeout_s: float, env: dict[str, str] | None = None) -> None:
    """Run ``command`` in the package; fail with its output when it does not succeed."""
    done = subprocess.run(
        command,
        cwd=PACKAGE,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def built_sdk() -> Path:
    """The package, installed and built once per session; yields its directory."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node and npm are needed for the TypeScript SDK (Node.js 18+)")
        raise AssertionError("unreachable")
    if _node_major(node) < MIN_NODE_MAJOR:
        unavailable(f"the TypeScript SDK needs Node.js {MIN_NODE_MAJOR}+")
    installed = PACKAGE / "node_modules" / ".package-lock.json"
    lock = PACKAGE / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        _run([npm, "ci", "--no-audit", "--no-fund"], 300)
    _run([npm, "run", "build"], 180)
    return PACKAGE


@pytest.fixture(scope="module")
def ts_org(services: Services) -> NewOrganisation:
    """A fresh Pro organisation for the module (Developer's consume budget would throttle acks)."""
    return new_organisation(services.database_url, tier="pro")


@pytest.fixture(scope="module")
def ts_developer(services: Services) -> NewOrganisation:
    """A Developer organisation: the conformance scenarios run ``as: developer``."""
    return new_organisation(services.database_url, tier="developer")


def _stack_env(url: str, org: NewOrganisation) -> dict[str, str]:
    return {"QUEUECORE_URL": url, "QUEUECORE_API_KEY": org.keys["production"].secret}


@pytest.mark.parametrize("test_file", NODE_FILES)
def test_node_suite_passes_against_the_real_stack(
    built_sdk: Path,
    api: str,
    ts_org: NewOrganisation,
    ts_developer: NewOrganisation,
    test_file: str,
) -> None:
    """``node --test`` on one file of sdk/typescript/test; its TAP output is the failure message."""
    env = {
        **_stack_env(api, ts_org),
        "QUEUECORE_DEVELOPER_API_KEY": ts_developer.keys["production"].secret,
    }
    _run(["node", "--test", f"test/{test_file}"], NODE_SUITE_TIMEOUT_S, env)


# --- kill and restart --------------------------------------------------------------------------


class NodeConsumer:
    """test/fixtures/consumer.mjs as a child process; its JSON lines collected as they come."""

    def __init__(self, env: dict[str, str]) -> None:
        self.lines: list[dict[str, Any]] = []
        self.process = subprocess.Popen(
            ["node", "test/fixtures/consumer.mjs"],
            cwd=PACKAGE,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def ids(self, event: str) -> set[str]:
        """The message ids of every line of ``event``."""
        return {line["id"] for line in list(self.lines) if line["event"] == event}

    def events(self) -> list[str]:
        """Every event name, in order."""
        return [line["event"] for line in list(self.lines)]

    def processed_after_ack(self) -> list[dict[str, Any]]:
        """Deliveries that reached the handler after the server had accepted their ack."""
        acked: set[str] = set()
        late = []
        for line in list(self.lines):
            if line["event"] == "acked":
                acked.add(line["id"])
            elif line["event"] == "processed" and line["id"] in acked:
                late.append(line)
        return late

    def until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Wait for ``check``, failing with the consumer's output."""
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"{what}: not true after {timeout_s}s; events {self.events()}")
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM (a graceful stop: it leaves its group), then wait."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


def _publish(http: httpx.Client, topic: str, values: range) -> set[str]:
    answer = http.post(
        f"/v1/topics/{topic}/messages/batch", json={"messages": [{"data": v} for v in values]}
    )
    answer.raise_for_status()
    return {r.get("messageId") or r["id"] for r in answer.json()["results"]}


def test_a_node_consumer_reconnects_after_a_kill_and_keeps_acking(
    built_sdk: Path, server: Server, ts_org: NewOrganisation
) -> None:
    env = {**_stack_env(server.url, ts_org), "TOPIC": "restart-ts", "GROUP": "g"}
    headers = {"Authorization": f"Bearer {env['QUEUECORE_API_KEY']}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
        http.post(
            "/v1/topics", json={"name": "restart-ts", "partitions": 2, "delivery": "exactly-once"}
        ).raise_for_status()
        consumer = NodeConsumer(env)
        try:
            consumer.until(lambda: "started" in consumer.events(), 30, "the consumer joined")
            sent = _publish(http, "restart-ts", range(20))
            consumer.until(lambda: sent <= consumer.ids("acked"), 30, "the first 20 are acked")
            server.kill()
            consumer.until(lambda: "disconnected" in consumer.events(), 30, "it saw the break")
            time.sleep(SESSION_TIMEOUT_S + 1)  # down past the session: the member is evicted
            server.start()
            sent |= _publish(http, "restart-ts", range(20, 40))
            consumer.until(lambda: sent <= consumer.ids("acked"), 60, "the next 20 are acked")
        finally:
            assert consumer.stop() == 0, consumer.events()
        group = http.get("/v1/topics/restart-ts/groups/g").json()
    events = consumer.events()
    assert consumer.ids("acked") == sent and len(sent) == 40
    assert consumer.processed_after_ack() == []  # exactly-once: nothing back after its ack
    assert events.count("connected") >= 2, events  # at start, and again after the restart
    assert "reconnecting" in events
    assert "rebalanced" in events  # silent past its 2 s session, it was evicted: rejoined
    assert group["consumers"] == 0  # the SIGTERM'd consumer left its group
    assert sum(p["lag"] for p in group["partitions"]) == 0
