"""A recorded history: one ``invoke`` and one ``complete`` event per operation, in a JSON-lines file.

An operation is a publish (one message or a batch), a delivery (a pull, or a batch of events read
from an SSE stream), an ack, a nack, a join, a heartbeat, a read of committed offsets, a lookup
resolving an unknown publish outcome, or the final read of a partition. Outcomes are ``ok``,
``fail`` (the server said nothing happened) or ``unknown`` (the request may or may not have taken
effect: a timeout, a lost connection, an answer saying so).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OK, FAIL, UNKNOWN = "ok", "fail", "unknown"


class Recorder:
    """Collects events in memory (thread-safe) and writes them as JSON lines."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    def now_s(self) -> float:
        """Seconds since the recorder was created."""
        return round(time.monotonic() - self._t0, 6)

    def invoke(self, op: str, process: str, **fields: Any) -> int:
        """Record the start of an operation; returns its id for :meth:`complete`."""
        op_id = next(self._ids)
        self._append({"type": "invoke", "id": op_id, "op": op, "process": process, **fields})
        return op_id

    def complete(self, op_id: int, outcome: str, **fields: Any) -> None:
        """Record the end of operation ``op_id`` with its outcome and results."""
        self._append({"type": "complete", "id": op_id, "outcome": outcome, **fields})

    def instant(self, op: str, process: str, outcome: str = OK, **fields: Any) -> int:
        """An operation observed at one instant (e.g. a batch of stream events)."""
        op_id = self.invoke(op, process, **fields)
        self.complete(op_id, outcome)
        return op_id

    def _append(self, event: dict[str, Any]) -> None:
        with self._lock:
            event["time"] = self.now_s()
            self.events.append(event)

    def write(self, path: Path) -> None:
        """Write every event as one JSON line."""
        with self._lock, path.open("w") as out:
            for event in self.events:
                out.write(json.dumps(event, separators=(",", ":")) + "\n")


def read_history(path: Path) -> list[dict[str, Any]]:
    """The events of a history file."""
    with path.open() as lines:
        return [json.loads(line) for line in lines if line.strip()]


@dataclass
class Op:
    """An operation: its invoke fields and its completion merged; ``outcome`` None if pending."""

    id: int
    op: str
    process: str
    invoke_s: float
    complete_s: float | None
    outcome: str | None
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        """A field of the invoke or complete event."""
        return self.fields.get(name, default)


def operations(events: Iterable[dict[str, Any]]) -> list[Op]:
    """Pair invoke and complete events into operations, in invocation order."""
    ops: dict[int, Op] = {}
    for event in events:
        rest = {k: v for k, v in event.items() if k not in {"type", "id", "time", "op", "process"}}
        if event["type"] == "invoke":
            ops[event["id"]] = Op(
                event["id"], event["op"], event["process"], event["time"], None, None, rest
            )
        elif event["id"] in ops:
            op = ops[event["id"]]
            op.complete_s, op.outcome = event["time"], rest.pop("outcome")
            op.fields.update(rest)
    return sorted(ops.values(), key=lambda o: (o.invoke_s, o.id))


def of_kind(ops: Iterable[Op], *kinds: str) -> Iterator[Op]:
    """The operations of the given kinds."""
    return (op for op in ops if op.op in kinds)
