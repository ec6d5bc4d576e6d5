"""The checker: a recorded history in, anomalies by name out. Pure: no services, no clock.

Ground truth is the history's final read (``final`` operations: every stored message of every
partition, with the payload id and attempt number each message carries) and its final committed
offsets (``offsets`` operations with ``final: true``). See ``docs/fault-testing.md`` for what each
anomaly means and which promise it breaks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.faults.history import FAIL, OK, UNKNOWN, Op, of_kind, operations

ANOMALIES = (
    "lost_write",
    "duplicate_idempotency_key",
    "duplicate_exactly_once",
    "duplicate_write",
    "inconsistent_offset",
    "partial_batch",
    "failed_write_stored",
    "unknown_resolved_wrongly",
    "redelivery_after_ack",
    "committed_offset_moved_back",
    "poll_skip",
    "non_monotonic_poll",
    "attempt_went_back",
    "slow_answer",
)
EXACTLY_ONCE = "exactly-once"
ANSWER_BOUND_S = 10.0  # docs/faults.md: QUEUECORE_DATABASE_REQUEST_TIMEOUT_MS + _WRITER_RESOLVE_MS
CLIENT_SLACK_S = 1.0  # the workload's own event loop, on a loaded machine
UNTIMED = frozenset({"topic", "final", "fault"})  # set-up, ground truth, the nemesis

Slot = tuple[str, int, int]  # topic, partition, offset
Stored = tuple[str, int]  # payload id, attempt


@dataclass
class Report:
    """Anomalies by name, each with the details that locate it, and the history's counts."""

    anomalies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    checked: Counter[str] = field(default_factory=Counter)  # how much each check looked at

    def add(self, name: str, **detail: Any) -> None:
        """Record one anomaly."""
        assert name in ANOMALIES, name
        self.anomalies.setdefault(name, []).append(detail)

    def by_name(self) -> dict[str, int]:
        """How many of each anomaly (every name, zeros included)."""
        return {name: len(self.anomalies.get(name, [])) for name in ANOMALIES}

    @property
    def ok(self) -> bool:
        """No anomaly at all."""
        return not any(self.anomalies.values())


@dataclass
class Truth:
    """The final read: what is stored where."""

    delivery: dict[str, str]
    at: dict[Slot, list[Stored]]
    where: dict[tuple[str, str], list[tuple[int, int, int]]]

    def stored(self, topic: str, pid: str, attempt: int | None = None) -> bool:
        """Whether ``pid`` (written by ``attempt``, if given) is stored in ``topic``."""
        return any(a == attempt or attempt is None for _, _, a in self.where.get((topic, pid), []))

    def stored_by_attempt_up_to(self, topic: str, pid: str, attempt: int) -> bool:
        """Whether ``pid`` is stored by an attempt no later than ``attempt``."""
        return any(a <= attempt for _, _, a in self.where.get((topic, pid), []))


def check(events: Iterable[dict[str, Any]]) -> Report:
    """Every anomaly of a history."""
    ops = operations(events)
    report = Report(counts=dict(Counter(op.op for op in ops)))
    truth = ground_truth(ops)
    check_final_read(truth, report)
    check_publishes(ops, truth, report)
    check_resolutions(ops, truth, report)
    check_deliveries(ops, truth, report)
    check_redelivery_after_ack(ops, truth, report)
    check_committed_offsets(ops, report)
    check_polls(ops, report)
    check_committed_were_delivered(ops, report)
    check_attempts(ops, report)
    check_answer_times(ops, report)
    return report


def ground_truth(ops: list[Op]) -> Truth:
    """Index the final read by slot and by payload id."""
    delivery = {op.get("topic"): op.get("delivery") for op in of_kind(ops, "topic")}
    at: dict[Slot, list[Stored]] = defaultdict(list)
    where: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    for op in of_kind(ops, "final"):
        topic, partition = op.get("topic"), op.get("partition")
        for msg in op.get("messages", []):
            at[(topic, partition, msg["offset"])].append((msg["pid"], msg["a"]))
            where[(topic, msg["pid"])].append((partition, msg["offset"], msg["a"]))
    return Truth(delivery, dict(at), dict(where))


def check_final_read(truth: Truth, report: Report) -> None:
    """Two messages at one offset; payloads stored more often than the contract allows."""
    report.checked["storedMessages"] += sum(len(stored) for stored in truth.at.values())
    for slot, stored in truth.at.items():
        if len(stored) > 1:
            report.add("inconsistent_offset", slot=list(slot), stored=stored, why="two at one")
    for (topic, pid), places in truth.where.items():
        if len(places) < 2:
            continue
        if truth.delivery.get(topic) == EXACTLY_ONCE:
            report.add(_eo_duplicate(pid), topic=topic, pid=pid, places=places)
        attempts = Counter(a for _, _, a in places)
        if truth.delivery.get(topic) != EXACTLY_ONCE and max(attempts.values()) > 1:
            report.add("duplicate_write", topic=topic, pid=pid, places=places)


def _eo_duplicate(pid: str) -> str:
    # Workload payload ids of keyed messages start with "k" (see workload.payload_id).
    return "duplicate_idempotency_key" if pid.startswith("k") else "duplicate_exactly_once"


def check_publishes(ops: list[Op], truth: Truth, report: Report) -> None:
    """Acknowledged publishes are stored where they were acknowledged; failed ones nowhere."""
    answered: dict[Slot, tuple[str, int]] = {}
    for op in of_kind(ops, "publish"):
        topic, attempt, items = op.get("topic"), op.get("attempt"), op.get("items")
        if op.outcome == OK:
            for item, result in zip(items, op.get("results", []), strict=False):
                slot = (topic, result["partition"], result["offset"])
                _check_acknowledged(slot, item["pid"], op, truth, report)
                earlier = answered.setdefault(slot, (item["pid"], op.id))
                if earlier[0] != item["pid"]:
                    report.add("inconsistent_offset", slot=list(slot), ops=[earlier[1], op.id])
        stored = [truth.stored(topic, item["pid"], attempt) for item in items]
        if op.outcome == UNKNOWN:  # resolved by the final read: how unknowns turned out
            written = "Written" if any(stored) else "NotWritten"
            report.checked[f"unknownPublishes{written}"] += 1
        if op.outcome == FAIL and any(stored):
            report.add("failed_write_stored", op=op.id, topic=topic, status=op.get("status"))
        if len(items) > 1 and any(stored) and not all(stored):
            report.add("partial_batch", op=op.id, topic=topic, stored=stored)


def _check_acknowledged(slot: Slot, pid: str, op: Op, truth: Truth, report: Report) -> None:
    report.checked["acknowledgedMessages"] += 1
    stored = truth.at.get(slot)
    if not stored:
        report.add("lost_write", op=op.id, slot=list(slot), pid=pid)
    elif pid not in {p for p, _ in stored}:
        report.add("inconsistent_offset", op=op.id, slot=list(slot), pid=pid, stored=stored)


def check_resolutions(ops: list[Op], truth: Truth, report: Report) -> None:
    """A lookup that resolved an unknown outcome told the truth."""
    for op in of_kind(ops, "resolve"):
        if op.outcome != OK:
            continue
        topic, pid = op.get("topic"), op.get("pid")
        if not op.get("written"):
            if truth.stored_by_attempt_up_to(topic, pid, op.get("attempt")):
                report.add("unknown_resolved_wrongly", op=op.id, pid=pid, said="not written")
            continue
        slot = (topic, op.get("partition"), op.get("offset"))
        if pid not in {p for p, _ in truth.at.get(slot, [])}:
            report.add("unknown_resolved_wrongly", op=op.id, pid=pid, said="written", slot=slot)


def check_deliveries(ops: list[Op], truth: Truth, report: Report) -> None:
    """A delivered message is the one stored at its offset."""
    for op, msg in _delivered(ops):
        slot = (op.get("topic"), msg["partition"], msg["offset"])
        report.checked["deliveries"] += 1
        stored = truth.at.get(slot, [])
        if msg["pid"] not in {p for p, _ in stored}:
            report.add("inconsistent_offset", op=op.id, slot=list(slot), delivered=msg["pid"])


def _delivered(ops: Iterable[Op]) -> Iterator[tuple[Op, dict[str, Any]]]:
    for op in of_kind(ops, "deliver"):
        if op.outcome == OK:
            for msg in op.get("messages", []):
                yield op, msg


def check_redelivery_after_ack(ops: list[Op], truth: Truth, report: Report) -> None:
    """On exactly-once topics, nothing is delivered again once its ack was accepted."""
    leased: dict[str, tuple[str, str, int, int]] = {}
    for op, msg in _delivered(ops):
        leased[msg["ackId"]] = (op.get("topic"), op.get("group"), msg["partition"], msg["offset"])
    acked_at: dict[tuple[str, str, int, int], float] = {}
    for op in of_kind(ops, "ack"):
        if op.outcome != OK or op.complete_s is None:
            continue
        for ack_id in op.get("acked", []):
            where = leased.get(ack_id)
            if where and truth.delivery.get(where[0]) == EXACTLY_ONCE:
                report.checked["acceptedAcksExactlyOnce"] += 1
                acked_at[where] = min(acked_at.get(where, op.complete_s), op.complete_s)
    for op, msg in _delivered(ops):
        where = (op.get("topic"), op.get("group"), msg["partition"], msg["offset"])
        if where in acked_at and op.invoke_s > acked_at[where]:
            report.add("redelivery_after_ack", op=op.id, at=list(where), attempt=msg["attempt"])


def check_committed_offsets(ops: list[Op], report: Report) -> None:
    """A read of a committed offset never sees less than a read that finished before it began."""
    reads: dict[tuple[str, str, int], list[tuple[float, float, int, int]]] = defaultdict(list)
    for op in of_kind(ops, "offsets"):
        if op.outcome == OK and op.complete_s is not None:
            for partition, committed in op.get("committed", {}).items():
                key = (op.get("topic"), op.get("group"), int(partition))
                reads[key].append((op.invoke_s, op.complete_s, committed, op.id))
    for key, series in reads.items():
        _check_series(key, series, report)


def _check_series(
    key: tuple[str, str, int], series: list[tuple[float, float, int, int]], report: Report
) -> None:
    by_completion = sorted(series, key=lambda r: r[1])
    best, best_op, i = -1, 0, 0
    report.checked["committedOffsetReads"] += len(series)
    for invoke_s, _, committed, op_id in sorted(series):
        while i < len(by_completion) and by_completion[i][1] < invoke_s:
            if by_completion[i][2] > best:
                best, best_op = by_completion[i][2], by_completion[i][3]
            i += 1
        if committed < best:
            report.add(
                "committed_offset_moved_back", at=list(key), was=best, now=committed,
                ops=[best_op, op_id],
            )  # fmt: skip


def check_polls(ops: list[Op], report: Report) -> None:
    """Outside rebalances, a member's first deliveries of a partition are consecutive offsets."""
    epoch: Counter[tuple[str, str]] = Counter()
    last: dict[tuple[str, str, int], tuple[str, int, int]] = {}  # member, epoch, offset
    for op in ops:
        group = (op.get("topic"), op.get("group"))
        if _disturbs(op):
            epoch[group] += 1
        if op.op != "deliver" or op.outcome != OK:
            continue
        for msg in op.get("messages", []):
            if msg["attempt"] != 1:
                continue
            key = (*group, msg["partition"])
            previous = last.get(key)
            last[key] = (op.process, epoch[group], msg["offset"])
            if previous is None or previous[:2] != (op.process, epoch[group]):
                continue
            _check_step(key, previous[2], msg["offset"], op, report)


def _disturbs(op: Op) -> bool:
    """Whether ``op`` may mark a rebalance or a delivery the client never saw."""
    if op.op == "join":
        return True
    if op.op == "deliver":
        return op.outcome != OK
    if op.op == "heartbeat":
        return op.outcome != OK or bool(op.get("shouldRejoin"))
    return False


def _check_step(key: tuple[str, str, int], before: int, now: int, op: Op, report: Report) -> None:
    report.checked["pollSteps"] += 1
    if now <= before:
        report.add("non_monotonic_poll", op=op.id, at=list(key), before=before, now=now)
    elif now > before + 1:
        report.add("poll_skip", op=op.id, at=list(key), before=before, now=now)


def check_committed_were_delivered(ops: list[Op], report: Report) -> None:
    """Every offset below a group's final committed offset was delivered to some member."""
    seen: dict[tuple[str, str, int], set[int]] = defaultdict(set)
    for op, msg in _delivered(ops):
        seen[(op.get("topic"), op.get("group"), msg["partition"])].add(msg["offset"])
    for op in of_kind(ops, "offsets"):
        if op.outcome != OK or not op.get("final"):
            continue
        start = op.get("start", {})
        for partition, committed in op.get("committed", {}).items():
            key = (op.get("topic"), op.get("group"), int(partition))
            first = start.get(partition, 0)
            report.checked["committedOffsetsDelivered"] += max(committed - first, 0)
            missing = sorted(set(range(first, committed)) - seen[key])
            if missing:
                report.add("poll_skip", at=list(key), never_delivered=missing[:20])


def check_attempts(ops: list[Op], report: Report) -> None:
    """A message delivered again carries a higher attempt than every earlier delivery of it in
    its group. Only a pull sent after the earlier delivery was received is compared: its lease
    is certainly the later one (a stream's events are stamped when the client reads them)."""
    seen: dict[tuple[str, str, int, int], list[tuple[float, int]]] = defaultdict(list)
    for op, msg in _delivered(ops):
        slot = (op.get("topic"), op.get("group"), msg["partition"], msg["offset"])
        seen[slot].append((op.complete_s or op.invoke_s, msg["attempt"]))
    for op, msg in _delivered(ops):
        if op.get("via") != "pull":
            continue
        slot = (op.get("topic"), op.get("group"), msg["partition"], msg["offset"])
        earlier = [attempt for received_s, attempt in seen[slot] if received_s < op.invoke_s]
        report.checked["attemptsCompared"] += len(earlier)
        if earlier and msg["attempt"] <= max(earlier):
            report.add(
                "attempt_went_back", op=op.id, at=list(slot), was=max(earlier),
                now=msg["attempt"],
            )  # fmt: skip


def check_answer_times(ops: list[Op], report: Report) -> None:
    """Every request is answered within the documented bound (a long poll: plus its wait),
    unless an API replica was frozen or down meanwhile (a stopped server bounds nothing).
    Stream events and Kafka sends are not single answers: a stream stays open, and a Kafka
    client's send retries retriable errors on its own (each retry one bounded answer)."""
    api_faults = [
        (op.invoke_s, op.complete_s if op.complete_s is not None else float("inf"))
        for op in of_kind(ops, "fault")
        if op.get("target") == "api"
    ]
    for op in ops:
        if op.op in UNTIMED or op.complete_s is None or op.get("via") in {"sse", "kafka"}:
            continue
        if any(begin <= op.complete_s and op.invoke_s <= end for begin, end in api_faults):
            continue
        report.checked["timedAnswers"] += 1
        took_s = op.complete_s - op.invoke_s
        slowest_ms = report.checked["slowestAnswerMs"]
        report.checked["slowestAnswerMs"] = max(slowest_ms, round(took_s * 1000))
        if took_s > ANSWER_BOUND_S + op.get("waitMs", 0) / 1000 + CLIENT_SLACK_S:
            report.add("slow_answer", op=op.id, kind=op.op, took_s=round(took_s, 2))


__all__ = ["ANOMALIES", "FAIL", "OK", "UNKNOWN", "Report", "check"]
