"""Running QueueCore processes from tests, and checking they are gone afterwards."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from infra.embedded import ServiceError, free_port_block, wait_until


def queuecore(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``queuecore ARGS`` with ``env`` added to this environment, output to ``log``."""
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "infra.cli", *args],
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def http_status(url: str, timeout_s: float = 2) -> int | None:
    """Status of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def wait_for(
    check: Callable[[], bool],
    timeout_s: float,
    what: str,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Poll ``check`` until true, failing the test early with the log when ``proc`` exits."""
    try:
        wait_until(check, timeout_s, what, proc, log)
    except ServiceError as exc:
        raise AssertionError(str(exc)) from None


def _ready(url: str) -> bool:
    return http_status(f"{url}/readyz") == 200


def descendants(pid: int) -> list[psutil.Process]:
    """Every live process below ``pid``."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (zombies count as gone)."""
    result = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                result.append(proc)
        except psutil.NoSuchProcess:
            continue
    return result


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
    """Signal ``proc`` and wait for it; SIGKILL if it does not go."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def gone_within(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for ``procs`` to exit; returns those still alive."""
    deadline = time.monotonic() + timeout_s
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(procs)


@dataclass
class Replica:
    """One ``queuecore serve`` process started by :func:`replicas`."""

    url: str
    log: Path
    process: subprocess.Popen[bytes]


@contextmanager
def replicas(
    env: dict[str, str], logs_dir: Path, count: int = 2, extra_env: dict[str, str] | None = None
) -> Iterator[list[Replica]]:
    """``count`` single-worker API processes on their own ports, ready; stopped afterwards."""
    started: list[Replica] = []
    try:
        for index in range(count):
            port, log = free_port_block(), logs_dir / f"serve-{index}.log"
            process_env = {
                **env,
                **(extra_env or {}),
                "QUEUECORE_HTTP_PORT": str(port),
                "QUEUECORE_HTTP_WORKERS": "1",
            }
            process = queuecore(["serve"], process_env, log)
            started.append(Replica(f"http://127.0.0.1:{port}", log, process))
        for index, replica in enumerate(started):
            wait_for(
                functools.partial(_ready, replica.url),
                60,
                f"replica {index} ready",
                replica.process,
                replica.log,
            )
        yield started
    finally:
        for replica in started:
            stop(replica.process)
