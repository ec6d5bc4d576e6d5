"""The checker reports each anomaly by name when it is injected into a small history (no services)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.checker import ANOMALIES, check
from tests.faults.history import FAIL, OK, UNKNOWN


class History:
    """A history built by hand, one operation at a time, each later than the one before."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.time_s = 0.0
        self.topic("eo", "exactly-once")
        self.topic("alo", "at-least-once")

    def op(self, op: str, process: str, outcome: str, begin: dict[str, Any], **end: Any) -> int:
        """Append an invoke and its complete."""
        op_id = len(self.events) + 1
        self.time_s += 1
        self.events.append(
            {"type": "invoke", "id": op_id, "op": op, "process": process, "time": self.time_s}
            | begin
        )
        self.time_s += 1
        self.events.append(
            {"type": "complete", "id": op_id, "outcome": outcome, "time": self.time_s} | end
        )
        return op_id

    def topic(self, name: str, delivery: str) -> None:
        self.op("topic", "setup", OK, {"topic": name, "delivery": delivery, "partitions": 1})

    def publish(
        self, topic: str, pids: list[str], offsets: list[int] | None, outcome: str = OK, a: int = 1
    ) -> None:
        items = [{"pid": pid, "ikey": pid if pid.startswith("k") else None} for pid in pids]
        results = [{"partition": 0, "offset": o} for o in offsets or []]
        begin = {"topic": topic, "items": items, "attempt": a}
        self.op("publish", "p1", outcome, begin, results=results, status=503)

    def final(self, topic: str, stored: list[tuple[int, str, int]]) -> None:
        messages = [{"offset": o, "pid": pid, "a": a} for o, pid, a in stored]
        self.op("final", "checker", OK, {"topic": topic, "partition": 0}, messages=messages)

    def deliver(
        self, topic: str, member: str, msgs: list[tuple[int, str, int]], outcome: str = OK
    ) -> None:
        messages = [
            {"partition": 0, "offset": o, "pid": pid, "attempt": n, "ackId": f"{member}-{o}-{n}"}
            for o, pid, n in msgs
        ]
        begin = {"topic": topic, "group": "g", "via": "pull"}
        self.op("deliver", member, outcome, begin, messages=messages)

    def ack(self, topic: str, member: str, ack_ids: list[str]) -> None:
        begin = {"topic": topic, "group": "g", "ackIds": ack_ids}
        self.op("ack", member, OK, begin, acked=ack_ids)

    def offsets(self, topic: str, committed: int, final: bool = False) -> None:
        begin = {"topic": topic, "group": "g", "final": final}
        self.op("offsets", "watcher", OK, begin, committed={"0": committed}, start={"0": 0})


def names(history: History) -> set[str]:
    return {name for name, count in check(history.events).by_name().items() if count}


def healthy() -> History:
    """Two acknowledged publishes, consumed and acked in order, read back as written."""
    h = History()
    h.publish("eo", ["k1"], [0])
    h.publish("eo", ["k2", "k3"], [1, 2])
    h.publish("alo", ["m1"], [0])
    h.deliver("eo", "c1", [(0, "k1", 1), (1, "k2", 1)])
    h.ack("eo", "c1", ["c1-0-1", "c1-1-1"])
    h.deliver("eo", "c1", [(2, "k3", 1)])
    h.offsets("eo", 2)
    h.final("eo", [(0, "k1", 1), (1, "k2", 1), (2, "k3", 1)])
    h.final("alo", [(0, "m1", 1)])
    h.offsets("eo", 2, final=True)
    return h


def test_a_healthy_history_has_no_anomaly() -> None:
    report = check(healthy().events)
    assert report.ok, report.anomalies
    assert report.by_name() == dict.fromkeys(ANOMALIES, 0)
    assert report.counts["publish"] == 3
    assert report.checked == {
        "storedMessages": 4,
        "acknowledgedMessages": 4,
        "deliveries": 3,
        "acceptedAcksExactlyOnce": 2,
        "committedOffsetReads": 2,
        "pollSteps": 2,
        "committedOffsetsDelivered": 2,
        "attemptsCompared": 0,
        "timedAnswers": 8,
        "slowestAnswerMs": 1000,
    }


def test_an_acknowledged_publish_missing_from_the_final_read_is_a_lost_write() -> None:
    h = History()
    h.publish("eo", ["k1"], [0])
    h.publish("eo", ["k2"], [1])
    h.final("eo", [(0, "k1", 1)])
    report = check(h.events)
    assert names(h) == {"lost_write"}
    assert report.anomalies["lost_write"][0]["pid"] == "k2"


def test_an_idempotency_key_stored_twice_is_a_duplicate() -> None:
    h = History()
    h.publish("eo", ["k1"], None, UNKNOWN, a=1)
    h.publish("eo", ["k1"], [1], OK, a=2)
    h.final("eo", [(0, "k1", 1), (1, "k1", 2)])
    assert "duplicate_idempotency_key" in names(h)


def test_a_keyless_message_stored_twice_on_an_exactly_once_topic_is_a_duplicate() -> None:
    h = History()
    h.publish("eo", ["m1"], [0])
    h.final("eo", [(0, "m1", 1), (1, "m1", 1)])
    assert names(h) == {"duplicate_exactly_once"}


def test_retried_copies_on_an_at_least_once_topic_are_allowed_but_one_request_twice_is_not() -> (
    None
):
    retried = History()
    retried.publish("alo", ["m1"], None, UNKNOWN, a=1)
    retried.publish("alo", ["m1"], [1], OK, a=2)
    retried.final("alo", [(0, "m1", 1), (1, "m1", 2)])
    assert names(retried) == set()
    twice = History()
    twice.publish("alo", ["m1"], [0])
    twice.final("alo", [(0, "m1", 1), (1, "m1", 1)])
    assert names(twice) == {"duplicate_write"}


def test_two_acknowledgements_of_one_offset_are_inconsistent() -> None:
    h = History()
    h.publish("alo", ["m1"], [0])
    h.publish("alo", ["m2"], [0])
    h.final("alo", [(0, "m1", 1), (1, "m2", 1)])
    assert "inconsistent_offset" in names(h)


def test_an_acknowledged_offset_reading_back_other_data_is_inconsistent() -> None:
    h = History()
    h.publish("alo", ["m1"], [0])
    h.final("alo", [(0, "m9", 1)])
    assert names(h) == {"inconsistent_offset"}


def test_a_delivery_of_other_data_than_stored_is_inconsistent() -> None:
    h = History()
    h.publish("alo", ["m1"], [0])
    h.deliver("alo", "c1", [(0, "m2", 1)])
    h.final("alo", [(0, "m1", 1)])
    assert names(h) == {"inconsistent_offset"}


def test_a_failure_answer_for_a_stored_write_is_reported() -> None:
    h = History()
    h.publish("alo", ["m1"], None, FAIL, a=1)
    h.publish("alo", ["m1"], [1], OK, a=2)
    h.final("alo", [(0, "m1", 1), (1, "m1", 2)])
    assert names(h) == {"failed_write_stored"}


def test_a_batch_stored_in_part_is_reported() -> None:
    h = History()
    h.publish("alo", ["m1", "m2"], None, UNKNOWN)
    h.final("alo", [(0, "m1", 1)])
    assert names(h) == {"partial_batch"}


def test_an_unknown_outcome_resolved_as_not_written_although_stored_is_reported() -> None:
    h = History()
    h.publish("eo", ["k1"], None, UNKNOWN, a=1)
    h.op("resolve", "p1", OK, {"topic": "eo", "pid": "k1", "attempt": 1}, written=False)
    h.final("eo", [(0, "k1", 1)])
    assert names(h) == {"unknown_resolved_wrongly"}


def test_an_unknown_outcome_resolved_as_written_although_absent_is_reported() -> None:
    h = History()
    h.publish("eo", ["k1"], None, UNKNOWN, a=1)
    resolved = {"written": True, "partition": 0, "offset": 0}
    h.op("resolve", "p1", OK, {"topic": "eo", "pid": "k1", "attempt": 1}, **resolved)
    h.final("eo", [])
    assert names(h) == {"unknown_resolved_wrongly"}


def test_a_delivery_after_an_accepted_ack_on_an_exactly_once_topic_is_reported() -> None:
    h = History()
    h.publish("eo", ["k1"], [0])
    h.deliver("eo", "c1", [(0, "k1", 1)])
    h.ack("eo", "c1", ["c1-0-1"])
    h.deliver("eo", "c2", [(0, "k1", 2)])
    h.final("eo", [(0, "k1", 1)])
    assert names(h) == {"redelivery_after_ack"}


def test_a_redelivery_after_an_ack_on_an_at_least_once_topic_is_allowed() -> None:
    h = History()
    h.publish("alo", ["m1"], [0])
    h.deliver("alo", "c1", [(0, "m1", 1)])
    h.ack("alo", "c1", ["c1-0-1"])
    h.deliver("alo", "c2", [(0, "m1", 2)])
    h.final("alo", [(0, "m1", 1)])
    assert names(h) == set()


def test_a_committed_offset_moving_back_is_reported() -> None:
    h = healthy()
    h.offsets("eo", 3)
    h.offsets("eo", 1)
    assert names(h) == {"committed_offset_moved_back"}


def test_overlapping_reads_of_a_committed_offset_may_disagree_in_either_order() -> None:
    h = healthy()
    h.events += [
        {"type": "invoke", "id": 900, "op": "offsets", "process": "w", "time": 100.0}
        | {"topic": "eo", "group": "g"},
        {"type": "invoke", "id": 901, "op": "offsets", "process": "w", "time": 100.5}
        | {"topic": "eo", "group": "g"},
        {"type": "complete", "id": 901, "outcome": OK, "time": 101.0, "committed": {"0": 2}},
        {"type": "complete", "id": 900, "outcome": OK, "time": 102.0, "committed": {"0": 3}},
    ]
    assert names(h) == set()


def test_a_member_skipping_an_offset_is_a_poll_skip() -> None:
    h = History()
    h.publish("eo", ["k1", "k2", "k3"], [0, 1, 2])
    h.deliver("eo", "c1", [(0, "k1", 1)])
    h.deliver("eo", "c1", [(2, "k3", 1)])
    h.final("eo", [(0, "k1", 1), (1, "k2", 1), (2, "k3", 1)])
    assert names(h) == {"poll_skip"}


def test_a_skip_across_a_rebalance_is_not_a_poll_skip() -> None:
    h = History()
    h.publish("eo", ["k1", "k2", "k3"], [0, 1, 2])
    h.deliver("eo", "c1", [(0, "k1", 1)])
    h.op("join", "c2", OK, {"topic": "eo", "group": "g"}, generation=2)
    h.deliver("eo", "c2", [(1, "k2", 1)])
    h.deliver("eo", "c1", [(2, "k3", 1)])
    h.final("eo", [(0, "k1", 1), (1, "k2", 1), (2, "k3", 1)])
    assert names(h) == set()


def test_a_committed_offset_past_a_message_nobody_received_is_a_poll_skip() -> None:
    h = History()
    h.publish("eo", ["k1", "k2"], [0, 1])
    h.deliver("eo", "c1", [(1, "k2", 1)])
    h.final("eo", [(0, "k1", 1), (1, "k2", 1)])
    h.offsets("eo", 2, final=True)
    report = check(h.events)
    assert names(h) == {"poll_skip"}
    assert report.anomalies["poll_skip"][0]["never_delivered"] == [0]


@pytest.mark.parametrize("again", [0, 1])
def test_a_member_going_back_is_a_non_monotonic_poll(again: int) -> None:
    h = History()
    h.publish("eo", ["k1", "k2"], [0, 1])
    h.deliver("eo", "c1", [(0, "k1", 1), (1, "k2", 1)])
    h.deliver("eo", "c1", [(again, ["k1", "k2"][again], 1)])
    h.final("eo", [(0, "k1", 1), (1, "k2", 1)])
    assert names(h) == {"non_monotonic_poll", "attempt_went_back"}  # attempt 1 once more


def test_a_message_delivered_again_as_the_same_attempt_is_an_attempt_going_back() -> None:
    h = History()
    h.publish("alo", ["m1"], [0])
    h.deliver("alo", "c1", [(0, "m1", 1)])
    h.op("join", "c2", OK, {"topic": "alo", "group": "g"}, generation=2)  # not a poll anomaly
    h.deliver("alo", "c2", [(0, "m1", 1)])  # a lease PostgreSQL forgot in a crash
    h.final("alo", [(0, "m1", 1)])
    report = check(h.events)
    assert names(h) == {"attempt_went_back"}
    assert report.anomalies["attempt_went_back"][0]["now"] == 1


def test_a_redelivery_as_the_next_attempt_is_not_an_attempt_going_back() -> None:
    h = History()
    h.publish("alo", ["m1"], [0])
    h.deliver("alo", "c1", [(0, "m1", 1)])
    h.deliver("alo", "c1", [(0, "m1", 2)])  # after its ack timeout
    h.final("alo", [(0, "m1", 1)])
    assert names(h) == set()


def test_an_answer_slower_than_the_documented_bound_is_reported() -> None:
    h = History()
    h.publish("alo", ["m1"], [0])
    h.events[-1]["time"] += 20  # answered 21 s after it was sent
    h.time_s += 20
    h.final("alo", [(0, "m1", 1)])
    report = check(h.events)
    assert names(h) == {"slow_answer"}
    assert report.anomalies["slow_answer"][0]["kind"] == "publish"


def test_a_slow_answer_while_an_api_replica_was_stopped_is_not_the_servers_bound() -> None:
    h = History()
    fault = {"type": "invoke", "id": 800, "op": "fault", "process": "nemesis"}
    h.events.append(fault | {"time": h.time_s + 1.5, "target": "api", "fault": "freeze"})
    h.publish("alo", ["m1"], [0])
    h.events[-1]["time"] += 20  # answered 21 s later: the replica was frozen meanwhile
    h.events.append({"type": "complete", "id": 800, "outcome": OK, "time": h.time_s + 19})
    h.time_s += 20
    h.final("alo", [(0, "m1", 1)])
    assert names(h) == set()


def test_a_kafka_send_is_a_client_library_call_not_one_answer() -> None:
    h = History()
    h.publish("alo", ["m1"], [0])
    h.events[-2]["via"] = "kafka"  # the producer retried a retriable error on its own
    h.events[-1]["time"] += 20
    h.time_s += 20
    h.final("alo", [(0, "m1", 1)])
    assert names(h) == set()


def test_a_long_poll_may_take_its_wait_on_top_of_the_bound() -> None:
    h = healthy()
    h.time_s += 10.5
    h.op("deliver", "c1", OK, {"topic": "alo", "group": "g", "via": "pull", "waitMs": 1000})
    assert names(h) == set()


def test_every_anomaly_name_is_covered_by_a_test_above() -> None:
    source = Path(__file__).read_text()
    assert [name for name in ANOMALIES if f'"{name}"' not in source] == []
