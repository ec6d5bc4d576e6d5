"""How much of the machine's CPU went to processes outside this benchmark during a phase.

On a shared 2-core machine another process's work changes every number; the report says how
much of it there was instead of hiding it. Ours = this process and every descendant (with the
children each has already reaped); the rest of the machine's busy time belongs to others.
"""

from __future__ import annotations

import contextlib
import os
import time
from types import TracebackType
from typing import Any

import psutil


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def our_cpu_s() -> float:
    """CPU seconds used by this process tree, including children that already exited."""
    own = os.times()
    return (
        own.user
        + own.system
        + own.children_user
        + own.children_system
        + _tree_cpu_s(os.getpid(), include_root=False)
    )


def _tree_cpu_s(pid: int, include_root: bool = True) -> float:
    """CPU seconds of ``pid`` (optionally) and its live descendants, with what each reaped."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)] if include_root else root.children(True)
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            c = proc.cpu_times()
            total += c.user + c.system + c.children_user + c.children_system
    return total


def _run_delay_s(pid: int) -> dict[int, float]:
    """Seconds each thread of ``pid``'s tree spent runnable but waiting for a CPU, by thread id
    (the kernel's ``schedstat``; empty where it is not available)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    delays: dict[int, float] = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error, OSError, ValueError):
            for thread in proc.threads():
                path = f"/proc/{proc.pid}/task/{thread.id}/schedstat"
                with open(path) as schedstat:
                    delays[thread.id] = int(schedstat.read().split()[1]) / 1e9
    return delays


def _kernel_s() -> dict[str, float]:
    """CPU seconds since boot the hypervisor took (steal) and soft interrupts used (softirq)."""
    times = psutil.cpu_times()
    return {"steal": getattr(times, "steal", 0.0), "softirq": getattr(times, "softirq", 0.0)}


def _client_cpu_s() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


class CpuWatch:
    """``with CpuWatch(groups) as w: …``, then shares of all cores, in per cent.

    ``w.others_pct`` is what processes outside this benchmark used; ``w.groups_pct`` what each
    named process tree (``{"api": pid, …}``) and this process (``"load generator"``) used.
    Two parts of ``others`` are told apart: ``w.steal_pct``, time the hypervisor gave another
    guest while this one wanted to run (outside anyone's control here), and ``w.softirq_pct``,
    soft interrupts, mostly the loopback traffic of the benchmark itself.
    ``w.waited_pct`` is, per named tree, how long its threads were ready to run but waited for a
    CPU (run-queue delay, summed over threads), as a share of the wall time: the contention a
    latency tail comes from when every service shares the same cores.
    """

    def __init__(self, groups: dict[str, int] | None = None) -> None:
        self.groups = groups or {}
        self.others_pct = self.steal_pct = self.softirq_pct = 0.0
        self.groups_pct: dict[str, float] = {}
        self.groups_cpu_s: dict[str, float] = {}  # CPU seconds of each named tree
        self.waited_pct: dict[str, float] = {}
        self._start: dict[str, float] = {}
        self._delays: dict[str, dict[int, float]] = {}

    def _sample(self) -> dict[str, float]:
        sample = {name: _tree_cpu_s(pid) for name, pid in self.groups.items()}
        sample.update(
            wall=time.monotonic(),
            busy=machine_busy_s(),
            ours=our_cpu_s(),
            client=_client_cpu_s(),
            **_kernel_s(),
        )
        return sample

    def __enter__(self) -> CpuWatch:
        self._delays = {name: _run_delay_s(pid) for name, pid in self.groups.items()}
        self._start = self._sample()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        end = self._sample()
        for name, pid in self.groups.items():
            before, after = self._delays.get(name, {}), _run_delay_s(pid)
            waited = sum(after[tid] - before[tid] for tid in after.keys() & before.keys())
            self.waited_pct[name] = round(
                waited / max(1e-9, end["wall"] - self._start["wall"]) * 100, 1
            )
        delta = {key: end[key] - self._start[key] for key in end}
        capacity = delta["wall"] * (os.cpu_count() or 1)
        if capacity <= 0:
            return
        self.others_pct = max(0.0, (delta["busy"] - delta["ours"]) / capacity * 100)
        self.steal_pct = round(delta["steal"] / capacity * 100, 1)
        self.softirq_pct = round(delta["softirq"] / capacity * 100, 1)
        self.groups_pct = {name: round(delta[name] / capacity * 100, 1) for name in self.groups}
        self.groups_cpu_s = {name: delta[name] for name in self.groups}
        self.groups_pct["load generator"] = round(delta["client"] / capacity * 100, 1)


def shares(watch: CpuWatch) -> dict[str, Any]:
    """A phase's CPU shares, as the results record them."""
    return {
        "others_cpu_pct": round(watch.others_pct, 1),
        "steal_cpu_pct": watch.steal_pct,
        "softirq_cpu_pct": watch.softirq_pct,
        "cpu_pct_by_process": watch.groups_pct,
        "cpu_wait_pct_by_process": watch.waited_pct,
    }
