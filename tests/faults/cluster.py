"""A private QueueCore cluster for one fault run, and the nemesis that breaks it.

The run starts its own PostgreSQL, SeaweedFS and Redis (never the test session's shared ones) and
two ``queuecore serve`` replicas. A fault reaches a target's whole process tree: PostgreSQL puts
each backend in a session of its own, so its postmaster and every backend are signalled one by one
(the postmaster first, so it forks nothing new meanwhile). Services are started and restarted from
the thread that created the cluster: they die with the thread that spawned them
(``PR_SET_PDEATHSIG``), and so do the replicas.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from infra import migrate
from infra.embedded import (
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedS3,
    ServiceError,
    die_with_parent,
    free_port_block,
)
from tests.faults.history import OK, Recorder
from tests.support.processes import http_status, wait_for
from tests.support.services import Services

TARGET_KINDS = ("api", "s3", "postgres", "redis")
FAULT_KINDS = ("kill", "freeze")
STATEMENT_TIMEOUT_S = 5.0  # the replicas' QUEUECORE_DATABASE_STATEMENT_TIMEOUT_MS (the default)
LONG_FREEZE_S = (STATEMENT_TIMEOUT_S + 7.0, STATEMENT_TIMEOUT_S + 13.0)  # past the answers'
# bound too (docs/faults.md): PostgreSQL cannot time out its own statements while stopped, so
# only the client's bounds end these waits


class Target(Protocol):
    """Something the nemesis can break: a process tree it can signal and restart."""

    name: str

    def root(self) -> subprocess.Popen[bytes] | None:
        """The target's first process, or None when it is not running."""
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
    kafka_port: int = 0

    @property
    def bootstrap(self) -> str:
        """The Kafka listener's address."""
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Spawn the replica in its own process group and wait until it is ready."""
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        env |= {"QUEUECORE_HTTP_PORT": str(self.port), "QUEUECORE_HTTP_WORKERS": "1"}
        env |= {"QUEUECORE_KAFKA_PORT": str(self.kafka_port)}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "infra.cli", "serve"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        ready = lambda: http_status(f"{self.url}/healthz") == 200  # noqa: E731
        wait_for(ready, 90, f"{self.name} ready", self.process, self.log)

    def root(self) -> subprocess.Popen[bytes] | None:
        """The replica's process."""
        return _running(self.process)

    def restart(self) -> None:
        """Start again on the same port."""
        self.start()

    def stop(self) -> None:
        """Stop gracefully, by force after 20 s."""
        if (process := _running(self.process)) is not None:
            signal_tree(process, signal.SIGCONT)
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                signal_tree(process, signal.SIGKILL)
                process.wait(10)


@dataclass
class Embedded:
    """An embedded service as a nemesis target."""

    name: str
    service: EmbeddedPostgres | EmbeddedS3 | EmbeddedRedis

    def root(self) -> subprocess.Popen[bytes] | None:
        """The service's first process (PostgreSQL's postmaster)."""
        return _running(self.service.process)

    def restart(self) -> None:
        """Start again on the same ports and data directory."""
        self.service.start()


def _running(process: subprocess.Popen[bytes] | None) -> subprocess.Popen[bytes] | None:
    return None if process is None or process.poll() is not None else process


def signal_tree(root: subprocess.Popen[bytes], sig: int) -> int:
    """Send ``sig`` to ``root`` and then to every process below it; returns how many got it."""
    before = _descendants(root.pid)  # a killed root has no children left to list
    with contextlib.suppress(ProcessLookupError):
        os.kill(root.pid, sig)
    reached = 1
    children = {p.pid: p for p in before + _descendants(root.pid)}  # + forked meanwhile
    for child in children.values():
        with contextlib.suppress(psutil.Error):
            child.send_signal(sig)
            reached += 1
    return reached


def client_backends(postmaster: subprocess.Popen[bytes]) -> int:
    """PostgreSQL's backends serving a client connection: their title names the client's
    address and port (``postgres: user db 127.0.0.1(53124) idle``); its own workers' do not."""
    titles = []
    for child in _descendants(postmaster.pid):
        with contextlib.suppress(psutil.Error):
            titles.append(" ".join(child.cmdline()))
    return sum(1 for title in titles if re.search(r"\(\d+\)", title))


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


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
                api.kafka_port = free_port_block()
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
            if (process := _running(service.process)) is not None:
                signal_tree(process, signal.SIGCONT)
            service.stop()


@dataclass
class Fault:
    """One injected fault: what, to whom, when and for how long."""

    target: str
    kind: str
    start_s: float
    duration_s: float
    restart_s: float = 0.0
    processes: int = 1  # how many processes the signal reached
    connections: int = 0  # of those, PostgreSQL backends serving a client connection


@dataclass
class Nemesis:
    """Kills (SIGKILL, then restart) and freezes (SIGSTOP, then SIGCONT) whole process trees."""

    cluster: Cluster
    seed: int
    kinds: tuple[str, ...] = TARGET_KINDS  # the target kinds to break, in turn
    done: list[Fault] = field(default_factory=list)
    _postgres_faults: int = 0
    recorder: Recorder | None = None  # faults go into the history too (the checker's bounds)

    def run(self, faults: int, duration_s: float, clock: Callable[[], float]) -> None:
        """Inject ``faults`` faults spread over ``duration_s``, every target kind in turn."""
        rng = random.Random(self.seed)
        kinds = list(self.kinds)
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
        root = target.root()
        if root is None:
            return
        fault, down_s = self._shape(kind, fault, rng)
        connections = client_backends(root) if kind == "postgres" else 0
        started = clock()
        op = self._record(kind, target.name, fault)
        if fault == "freeze":
            reached = signal_tree(root, signal.SIGSTOP)
            time.sleep(down_s)
            signal_tree(root, signal.SIGCONT)
            restart_s = 0.0
        else:
            reached = signal_tree(root, signal.SIGKILL)
            _reap(root)
            time.sleep(down_s)
            began = time.monotonic()
            _restart(target)
            restart_s = time.monotonic() - began
        if op is not None and self.recorder is not None:
            self.recorder.complete(op, OK)
        self.done.append(
            Fault(f"{kind}:{target.name}", fault, started, down_s, restart_s, reached, connections)
        )

    def _shape(self, kind: str, fault: str, rng: random.Random) -> tuple[str, float]:
        """The fault and how long it lasts: 1-4 s, but every other PostgreSQL fault, the
        first included, is a freeze longer than the statement timeout."""
        down_s = rng.uniform(1.0, 4.0)
        if kind != "postgres":
            return fault, down_s
        self._postgres_faults += 1
        if self._postgres_faults % 2 == 1:
            return "freeze", rng.uniform(*LONG_FREEZE_S)
        return fault, down_s

    def _record(self, kind: str, name: str, fault: str) -> int | None:
        if self.recorder is None:
            return None
        return self.recorder.invoke("fault", "nemesis", target=kind, name=name, fault=fault)

    def by_kind(self) -> dict[str, int]:
        """Faults injected, by ``target kind:fault`` (e.g. ``postgres:kill``)."""
        return dict(Counter(f"{f.target.split(':')[0]}:{f.kind}" for f in self.done))


def _restart(target: Target, attempts: int = 3) -> None:
    """Restart a killed target; a target that cannot come back fails the run (not a skip)."""
    for attempt in range(1, attempts + 1):
        try:
            target.restart()
            return
        except (ServiceError, AssertionError) as exc:
            if attempt == attempts:
                raise RuntimeError(f"{target.name} did not restart: {exc}") from exc
            time.sleep(1)


def _reap(root: subprocess.Popen[bytes]) -> None:
    """Wait for the killed process to be gone, so its ports come free."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        root.wait(10)
    time.sleep(0.2)
