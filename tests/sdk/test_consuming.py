"""Consuming with the SDK against a real API process: ack, groups, nack, DLQ, leaving, rejoining."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from queuecore import Conflict, Message, OutgoingMessage, QueueCore

from tenants.models import NewOrganisation
from tests.sdk.conftest import eventually, stopped_after

pytestmark = pytest.mark.e2e


class Inbox:
    """Messages a consumer received, thread-safe."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._lock = threading.Lock()

    def add(self, message: Message) -> None:
        with self._lock:
            self.messages.append(message)

    def __len__(self) -> int:
        with self._lock:
            return len(self.messages)


def acking(inbox: Inbox) -> Callable[[Message], None]:
    """A handler that records and acks."""

    def handle(message: Message) -> None:
        inbox.add(message)
        message.ack()

    return handle


def test_published_messages_are_consumed_and_acked_once_with_lag_zero(pq: QueueCore) -> None:
    pq.topics.create("orders", partitions=3)
    batch = [OutgoingMessage({"n": i}, key=f"ord_{i}", headers={"h": str(i)}) for i in range(20)]
    consumer = pq.consume("orders", "billing", start_from="earliest", ack_timeout="2s")
    inbox = Inbox()
    consumer.on_message(acking(inbox))
    consumer.start()
    try:
        assert pq.publish_batch("orders", batch).count == 20
        single = pq.publish("orders", {"n": 20}, key="ord_20")
        eventually(lambda: len(inbox) == 21, 20, "all 21 messages consumed")
        time.sleep(3)  # past the 2 s ack timeout: an unacked message would be delivered again
        assert len(inbox) == 21
    finally:
        consumer.stop()
    received = {m.data["n"]: m for m in inbox.messages}
    assert sorted(received) == list(range(21))
    assert {m.attempt for m in inbox.messages} == {1}
    assert received[20].message_id == single.message_id and received[20].offset == single.offset
    assert received[7].key == "ord_7" and received[7].headers == {"h": "7"}
    assert all(o.lag == 0 for o in pq.offsets.get("orders", "billing"))
    assert pq.offsets.get("orders", "billing", partition=single.partition).lag == 0
    assert pq.consumer_groups.describe("orders", "billing").lag == 0


def test_two_consumers_split_the_partitions_and_get_every_message_exactly_once(
    pq: QueueCore,
) -> None:
    pq.topics.create("work", partitions=4)
    pq.consumer_groups.configure("work", "g", start_from="earliest")
    inboxes = [Inbox(), Inbox()]
    consumers = [pq.consume("work", "g", client_id=f"c{i}") for i in range(2)]
    for consumer, inbox in zip(consumers, inboxes, strict=True):
        consumer.on_message(acking(inbox))
        consumer.start()
    try:
        members = {c.member_id for c in consumers}
        eventually(
            lambda: (
                {p.consumer for p in pq.consumer_groups.describe("work", "g").partitions} == members
            ),
            20,
            "both consumers own partitions",
        )
        for start in range(0, 200, 50):
            items = [OutgoingMessage({"n": n}, key=f"k{n}") for n in range(start, start + 50)]
            pq.publish_batch("work", items)
        eventually(lambda: len(inboxes[0]) + len(inboxes[1]) >= 200, 30, "200 messages consumed")
        time.sleep(1)  # a duplicate delivery would arrive now
    finally:
        for consumer in consumers:
            consumer.stop()
    every = [m for inbox in inboxes for m in inbox.messages]
    counts = collections.Counter(m.data["n"] for m in every)
    assert sorted(counts) == list(range(200)) and set(counts.values()) == {1}
    partitions = [{m.partition for m in inbox.messages} for inbox in inboxes]
    assert partitions[0] and partitions[1], "each consumer received messages"
    assert not partitions[0] & partitions[1], "a partition was delivered to both consumers"
    assert partitions[0] | partitions[1] == {0, 1, 2, 3}
    assert pq.consumer_groups.describe("work", "g").lag == 0


def test_a_nacked_message_comes_back_as_attempt_2(pq: QueueCore) -> None:
    pq.topics.create("flaky", partitions=1)
    sent = pq.publish("flaky", {"job": 1})
    seen: list[tuple[str, int, int]] = []
    consumer = pq.consume("flaky", "g", start_from="earliest", dead_letter={"max_retries": 3})
    with stopped_after(consumer) as c:
        for message in c:
            seen.append((message.message_id, message.attempt, message.offset))
            if message.attempt == 1:
                assert message.nack(error="try again", retry_delay=0) is False
            else:
                message.ack()
                break
    assert seen == [(sent.message_id, 1, sent.offset), (sent.message_id, 2, sent.offset)]
    assert pq.offsets.get("flaky", "g", partition=0).lag == 0


def test_a_handler_that_raises_gets_its_message_nacked_and_redelivered(pq: QueueCore) -> None:
    pq.topics.create("raises", partitions=1)
    pq.publish("raises", "payload")
    consumer = pq.consume("raises", "g", start_from="earliest", dead_letter={"retry_delay": 0})
    attempts: list[int] = []
    errors: list[Exception] = []

    @consumer.on_message
    def handle(message: Message) -> None:
        attempts.append(message.attempt)
        if message.attempt == 1:
            raise ValueError("cannot parse")
        message.ack()

    consumer.on_error(errors.append)
    consumer.start()
    try:
        eventually(lambda: attempts == [1, 2], 15, "redelivered after the handler raised")
    finally:
        consumer.stop()
    assert [type(e) for e in errors] == [ValueError]
    assert pq.offsets.get("raises", "g", partition=0).lag == 0


def test_dead_lettered_message_is_inspected_replayed_and_consumed_again(pq: QueueCore) -> None:
    pq.topics.create("payments", partitions=2)
    sent = pq.publish("payments", {"amount": -1}, key="bad")
    consumer = pq.consume("payments", "g", start_from="earliest", dead_letter={"max_retries": 0})
    with stopped_after(consumer) as c:
        first = next(iter(c))
        assert first.message_id == sent.message_id
        assert first.nack(error="negative amount") is True
        page = pq.dlq.inspect("payments", "g", limit=10)
        assert page.depth == 1 and page.next_after is None
        [dead] = page.messages
        assert (dead.message_id, dead.error, dead.attempts) == (
            sent.message_id,
            "negative amount",
            1,
        )
        assert dead.data == {"amount": -1} and dead.key == "bad"
        assert pq.consumer_groups.describe("payments", "g").dead_letters == 1
        assert [g.dead_letters for g in pq.consumer_groups.list("payments")] == [1]
        assert pq.dlq.replay("payments", "g", sent.message_id) == 1
        again = next(iter(c))
        assert (again.message_id, again.attempt, again.data) == (sent.message_id, 1, {"amount": -1})
        again.ack()
    assert pq.dlq.inspect("payments", "g").depth == 0
    assert pq.dlq.replay_all("payments", "g") == 0
    with pytest.raises(Conflict) as refused:
        pq.dlq.replay("payments", "g", sent.message_id)
    assert refused.value.code == "DLQ_MESSAGE_REPLAYED"
    assert refused.value.request_id.startswith("req_")


def test_stop_leaves_the_group_at_once(pq: QueueCore) -> None:
    pq.topics.create("leaving", partitions=2)
    consumer = pq.consume("leaving", "g", start_from="earliest", session_timeout="60s")
    consumer.on_message(lambda message: message.ack())
    consumer.start()
    member = consumer.member_id
    assert [m.id for m in pq.consumer_groups.describe("leaving", "g").members] == [member]
    time.sleep(0.5)  # the worker is inside a 10 s long-poll now
    started = time.monotonic()
    consumer.stop()
    assert time.monotonic() - started < 5, "stop() waited for the long-poll"
    group = pq.consumer_groups.describe("leaving", "g")
    assert group.members == [] and group.consumers == 0
    assert all(p.consumer is None for p in group.partitions)


def test_stop_from_another_thread_waits_for_the_message_in_hand(pq: QueueCore) -> None:
    pq.topics.create("in-hand", partitions=1)
    pq.publish("in-hand", {"slow": True})
    stopper: list[threading.Thread] = []
    with stopped_after(pq.consume("in-hand", "g", start_from="earliest")) as consumer:
        for message in consumer:
            stopper.append(threading.Thread(target=consumer.stop))
            stopper[0].start()
            time.sleep(0.5)  # still working on it while stop() is called
            assert stopper[0].is_alive(), "stop() did not wait for the message in hand"
            message.ack()  # the lease is still ours: accepted
    stopper[0].join(10)
    assert pq.consumer_groups.describe("in-hand", "g").members == []
    assert pq.offsets.get("in-hand", "g", partition=0).lag == 0


def test_offsets_reset_is_refused_while_consuming_and_replays_everything_after(
    pq: QueueCore,
) -> None:
    pq.topics.create("replay", partitions=1)
    pq.publish_batch("replay", [1, 2, 3])
    with stopped_after(pq.consume("replay", "g", start_from="earliest")) as consumer:
        got = [m for _, m in zip(range(3), consumer, strict=False)]
        assert consumer.ack(got) == []
        with pytest.raises(Conflict) as refused:
            pq.consumer_groups.reset_offsets("replay", "g", to="earliest")
        assert refused.value.code == "GROUP_HAS_ACTIVE_MEMBERS"
    assert pq.offsets.get("replay", "g", partition=0).current == 3
    assert [p.current for p in pq.consumer_groups.reset_offsets("replay", "g", to="earliest")] == [
        0
    ]
    assert pq.offsets.seek("replay", "g", partition=0, offset=2).lag == 1
    with stopped_after(pq.consume("replay", "g")) as consumer:
        [last] = [m for _, m in zip(range(1), consumer, strict=False)]
        assert (last.offset, last.data) == (2, 3)
        last.ack()


def test_a_member_the_server_removed_rejoins_and_keeps_consuming(
    pq: QueueCore, api: str, org: NewOrganisation
) -> None:
    pq.topics.create("evicted", partitions=2)
    consumer = pq.consume("evicted", "g", start_from="earliest")
    inbox = Inbox()
    consumer.on_message(acking(inbox))
    consumer.start()
    try:
        gone = consumer.member_id
        assert gone is not None
        removed = httpx.delete(
            f"{api}/v1/topics/evicted/groups/g/members/{gone}",
            headers={"Authorization": f"Bearer {org.keys['production'].secret}"},
        )
        assert removed.status_code == 204
        pq.publish("evicted", {"after": "eviction"})
        eventually(lambda: len(inbox) == 1, 20, "consumed after the member was removed")
        assert consumer.member_id not in (None, gone)
        members = [m.id for m in pq.consumer_groups.describe("evicted", "g").members]
        assert members == [consumer.member_id]
    finally:
        consumer.stop()
    assert inbox.messages[0].data == {"after": "eviction"}


def test_a_streaming_consumer_receives_pushed_messages(pq: QueueCore) -> None:
    pq.topics.create("pushed", partitions=2)
    consumer = pq.consume("pushed", "g", start_from="earliest", stream=True)
    inbox = Inbox()
    consumer.on_message(acking(inbox))
    consumer.start()
    try:
        time.sleep(0.5)  # the stream is open and idle before anything is published
        for n in range(5):
            pq.publish("pushed", {"n": n}, key=f"k{n}")
        eventually(lambda: len(inbox) == 5, 20, "five messages pushed")
    finally:
        consumer.stop()
    assert sorted(m.data["n"] for m in inbox.messages) == [0, 1, 2, 3, 4]
    assert all(o.lag == 0 for o in pq.offsets.get("pushed", "g"))
