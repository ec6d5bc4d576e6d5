"""A private QueueCore cluster for one fault run, and the nemesis that breaks it.

The run starts its own PostgreSQL, SeaweedFS and Redis (never the test session's shared ones) and
two ``queuecore serve`` replicas. Every process is the leader of its own process group, so a fault
reaches all of it: PostgreSQL's postmaster and every backend are frozen or killed together.
Services are started and restarted from the thread that created the cluster: embedded services
die with the thread that spawned them (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from infra import migrate
from infra.embedded import EmbeddedPostgres, EmbeddedRedis, EmbeddedS3, free_port_block
from tests.support.processes import http_status, wait_for
from tests.support.services import Services

TARGET_KINDS = ("api", "s3", "postgres", "redis")
FAULT_KINDS = ("kill", "freeze")


class Target(Protocol):
    """Something the nemesis can break: a process group it can signal and restart."""

    name: str

    def pgid(self) -> int | None:
        """The process group of the target, or None when it is not running."""
        ...

    def restart(self) -> None:
        """Start it again after a kill and wait until it serves."""
        ...


@dataclass
class Api:
    """One ``queuecore serve`` replica on a fixed port, restartable on that port."""

    name: str
    port: int
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Spawn the replica in its own process group and wait until it is ready."""
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        env |= {"QUEUECORE_HTTP_PORT": str(self.port), "QUEUECORE_HTTP_WORKERS": "1"}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "infra.cli", "serve"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        ready = lambda: http_status(f"{self.url}/healthz") == 200  # noqa: E731
        wait_for(ready, 90, f"{self.name} ready", self.process, self.log)

    def pgid(self) -> int | None:
        """The replica's process group."""
        return _running_pgid(self.process)

    def restart(self) -> None:
        """Start again on the same port."""
        self.start()

    def stop(self) -> None:
        """Stop gracefully, by force after 20 s."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


@dataclass
class Embedded:
    """An embedded service as a nemesis target."""

    name: str
    service: EmbeddedPostgres | EmbeddedS3 | EmbeddedRedis

    def pgid(self) -> int | None:
        """The service's process group (it is started as a session leader)."""
        return _running_pgid(self.service.process)

    def restart(self) -> None:
        """Start again on the same ports and data directory."""
        self.service.start()


def _running_pgid(process: subprocess.Popen[bytes] | None) -> int | None:
    if process is None or process.poll() is not None:
        return None
    return process.pid  # a session leader's pid is its group id


@dataclass
class Cluster:
    """Private services and two API replicas sharing them."""

    root: Path
    postgres: EmbeddedPostgres
    s3: EmbeddedS3
    redis: EmbeddedRedis
    apis: list[Api] = field(default_factory=list)

    @classmethod
    def start(cls, root: Path, replicas: int = 2) -> Cluster:
        """Start everything (about 10-20 s), migrate the database, start the replicas."""
        logs = root / "logs"
        pg = EmbeddedPostgres(root / "postgres", logs, free_port_block())
        s3 = EmbeddedS3(root / "s3", logs, free_port_block(8), "queuecore-faults")
        rd = EmbeddedRedis(root / "redis", logs, free_port_block())
        cluster = cls(root, pg, s3, rd)
        try:
            for service in (pg, s3, rd):
                service.start()
            migrate.apply(pg.url)
            for index in range(replicas):
                api = Api(f"api{index}", free_port_block(), cluster.env(), logs / f"api{index}.log")
                cluster.apis.append(api)
                api.start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def env(self) -> dict[str, str]:
        """The ``QUEUECORE_*`` variables of a process using this cluster."""
        services = Services(
            self.postgres.url, self.redis.url, self.s3.endpoint_url, f"s3://{self.s3.bucket}"
        )
        return services.env() | {"QUEUECORE_LOG_LEVEL": "WARNING"}

    def targets(self) -> dict[str, list[Target]]:
        """What the nemesis may break, by kind."""
        return {
            "api": list(self.apis),
            "s3": [Embedded("s3", self.s3)],
            "postgres": [Embedded("postgres", self.postgres)],
            "redis": [Embedded("redis", self.redis)],
        }

    def stop(self) -> None:
        """Stop everything this cluster started."""
        for api in self.apis:
            api.stop()
        for service in (self.redis, self.s3, self.postgres):
            if service.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.process.pid, signal.SIGCONT)
            service.stop()


@dataclass
class Fault:
    """One injected fault: what, to whom, when and for how long."""

    target: str
    kind: str
    start_s: float
    duration_s: float
    restart_s: float = 0.0


@dataclass
class Nemesis:
    """Kills (SIGKILL, then restart) and freezes (SIGSTOP, then SIGCONT) whole process groups."""

    cluster: Cluster
    seed: int
    done: list[Fault] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def run(self, faults: int, duration_s: float, clock: Callable[[], float]) -> None:
        """Inject ``faults`` faults spread over ``duration_s``, every target kind in turn."""
        rng = random.Random(self.seed)
        kinds = list(TARGET_KINDS)
        rng.shuffle(kinds)
        slot_s = duration_s / max(faults, 1)
        deadline = time.monotonic() + duration_s
        for number in range(faults):
            began = time.monotonic()
            time.sleep(min(rng.uniform(0.2, 0.5) * slot_s, max(0.0, deadline - began)))
            kind = kinds[number % len(kinds)]
            target = rng.choice(self.cluster.targets()[kind])
            self.inject(target, kind, rng.choice(FAULT_KINDS), rng, clock)
            if self.done:
                print(f"fault {len(self.done)}/{faults}: {self.done[-1]}", file=sys.stderr)
            time.sleep(max(0.0, began + slot_s - time.monotonic()))

    def inject(
        self,
        target: Target,
        kind: str,
        fault: str,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> None:
        """One fault on ``target``; returns once it is healed."""
        pgid = target.pgid()
        if pgid is None:
            return
        started, down_s = clock(), rng.uniform(1.0, 4.0)
        if fault == "freeze":
            os.killpg(pgid, signal.SIGSTOP)
            time.sleep(down_s)
            os.killpg(pgid, signal.SIGCONT)
            self.done.append(Fault(f"{kind}:{target.name}", fault, started, down_s))
            return
        os.killpg(pgid, signal.SIGKILL)
        _reap(target)
        time.sleep(down_s)
        began = time.monotonic()
        target.restart()
        restart_s = time.monotonic() - began
        self.done.append(Fault(f"{kind}:{target.name}", fault, started, down_s, restart_s))

    def by_kind(self) -> dict[str, int]:
        """Faults injected, by ``target kind:fault`` (e.g. ``postgres:kill``)."""
        return dict(Counter(f"{f.target.split(':')[0]}:{f.kind}" for f in self.done))


def _reap(target: Target) -> None:
    """Wait for the killed process (and its group) to be gone, so its ports come free."""
    process = getattr(target, "process", None) or getattr(
        getattr(target, "service", None), "process", None
    )
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
    time.sleep(0.2)
