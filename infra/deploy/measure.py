"""Memory and CPU of each QueueCore role under the publish benchmark's load, for the
manifests' requests and limits.

``python -m infra.deploy.measure [benchmark options]`` runs ``python -m benchmarks.publish``
(by default ``--quick --peers none``), starts ``queuecore worker`` and ``queuecore beat`` on the
benchmark's own services once its API is up, and a Spark driver (``queuecore spark compaction
--min-age-s 0``, ``local[2]``: driver and executors in one JVM, so an upper bound of a driver's
share) over the segments the benchmark writes, ``SPARK_DELAY_S`` later. It samples every role's
process tree with psutil twice a second: peak RSS (MiB) and CPU (cores, mean and peak over 2 s
windows). It prints one JSON object; the benchmark's own report goes to stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

SAMPLE_S = 0.5
WINDOW_SAMPLES = 4  # CPU peaks are taken over 2 s, not over one noisy half second
MIB = 1 << 20
SPARK_DELAY_S = 2.0


@dataclass
class RoleSamples:
    """What was seen of one role's process tree."""

    pid: int
    rss_mib: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    at_s: list[float] = field(default_factory=list)

    def sample(self) -> None:
        """Add the tree's RSS and cumulative CPU time now."""
        rss, cpu = 0, 0.0
        for proc in _tree(self.pid):
            try:
                rss += proc.memory_info().rss
                times = proc.cpu_times()
                cpu += times.user + times.system
            except psutil.Error:
                continue
        if rss:
            self.rss_mib.append(rss / MIB)
            self.cpu_s.append(cpu)
            self.at_s.append(time.monotonic())

    def summary(self) -> dict[str, float]:
        """Peak RSS, and mean and peak CPU in cores."""
        if len(self.at_s) < WINDOW_SAMPLES + 1:
            return {}
        rates = [
            max(0.0, self.cpu_s[i] - self.cpu_s[i - WINDOW_SAMPLES])
            / (self.at_s[i] - self.at_s[i - WINDOW_SAMPLES])
            for i in range(WINDOW_SAMPLES, len(self.at_s))
        ]
        span_s = self.at_s[-1] - self.at_s[0]
        return {
            "peakRssMiB": round(max(self.rss_mib), 1),
            "meanCpuCores": round(max(0.0, self.cpu_s[-1] - self.cpu_s[0]) / span_s, 3),
            "peakCpuCores": round(max(rates), 3),
            "sampledS": round(span_s, 1),
        }


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _find_serve(bench: subprocess.Popen[bytes]) -> psutil.Process | None:
    for proc in _tree(bench.pid)[1:]:
        try:
            if "serve" in proc.cmdline() and "infra.cli" in proc.cmdline():
                return proc
        except psutil.Error:
            continue
    return None


def _start_role(role: list[str], env: dict[str, str], log_dir: str) -> subprocess.Popen[bytes]:
    log = open(os.path.join(log_dir, f"{role[0]}.log"), "wb")  # noqa: SIM115 - lives with the child
    return subprocess.Popen(
        [sys.executable, "-m", "infra.cli", *role],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def measure(bench_args: list[str]) -> dict[str, Any]:
    """Run the benchmark and sample the API, a worker and beat until it ends."""
    log_dir = tempfile.mkdtemp(prefix="queuecore-measure-")
    bench = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.publish", *bench_args], stdout=sys.stderr
    )
    roles: dict[str, RoleSamples] = {}
    children: list[subprocess.Popen[bytes]] = []
    env: dict[str, str] = {}
    started_s = 0.0
    try:
        while bench.poll() is None:
            if "api" not in roles and (serve := _find_serve(bench)) is not None:
                env = {**os.environ, **_queuecore_env(serve), "QUEUECORE_SPARK_MASTER": "local[2]"}
                started_s = time.monotonic()
                worker = _start_role(["worker", "--concurrency", "2"], env, log_dir)
                schedule = os.path.join(log_dir, "beat-schedule")
                beat = _start_role(["beat", "--schedule", schedule], env, log_dir)
                children += [worker, beat]
                roles.update(
                    api=RoleSamples(serve.pid),
                    worker=RoleSamples(worker.pid),
                    beat=RoleSamples(beat.pid),
                )
            if env and "sparkDriver" not in roles and time.monotonic() - started_s > SPARK_DELAY_S:
                spark = _start_role(["spark", "compaction", "--min-age-s", "0"], env, log_dir)
                children.append(spark)
                roles["sparkDriver"] = RoleSamples(spark.pid)
            for samples in roles.values():
                samples.sample()
            time.sleep(SAMPLE_S)
    finally:
        for child in children:
            _stop(child)
    return {
        "benchmark": ["python", "-m", "benchmarks.publish", *bench_args],
        "benchmarkExit": bench.returncode,
        "roles": {name: samples.summary() for name, samples in roles.items()},
        "logs": log_dir,
    }


def _queuecore_env(serve: psutil.Process) -> dict[str, str]:
    return {k: v for k, v in serve.environ().items() if k.startswith("QUEUECORE_")}


def main() -> int:
    """Print the figures as one JSON object."""
    bench_args = sys.argv[1:] or ["--quick", "--peers", "none"]
    print(json.dumps(measure(bench_args), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
