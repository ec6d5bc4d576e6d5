"""The workload: producers and consumer groups over two API replicas, every call recorded.

Producers publish single messages and batches to an exactly-once and an at-least-once topic, with
and without idempotency keys, and retry failed or timed-out calls with the same key (and the same
payload ids) on the other replica. Consumers are a pull member and an SSE member per topic, in one
group per topic; they ack what they receive and now and then nack it. A watcher reads the groups'
committed offsets. Every payload is ``{"pid": <unique id>, "a": <attempt>}`` so the checker can
tell which request stored which message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.faults import resolve
from tests.faults.history import FAIL, OK, UNKNOWN, Recorder

EO, ALO = "faults.eo", "faults.alo"
DELIVERY = {EO: "exactly-once", ALO: "at-least-once"}
PARTITIONS = 3
MAX_ATTEMPTS = 4
PULL_WAIT_MS = 1000


def payload_id(keyed: bool, producer: int, seq: int) -> str:
    """A unique payload id; keyed messages' ids start with ``k`` (the checker relies on it)."""
    return f"{'k' if keyed else 'm'}{producer}-{seq}"


def group_of(topic: str) -> str:
    """The one consumer group of a topic."""
    return "g-" + topic.split(".")[-1]


@dataclass
class Config:
    """How much work, how fast, and the seed that makes it replayable."""

    seed: int = 13
    producers: int = 4
    kafka_producers: int = 2  # aiokafka producers (tests/faults/kafka_producers.py)
    min_ops: int = 0  # producers go on after the fault period until this many are recorded
    request_timeout_s: float = 20.0  # above the server's bound: the checker times answers
    batch_ratio: float = 0.3
    keyed_ratio: float = 0.7
    nack_ratio: float = 0.03


@dataclass
class Workload:
    """Runs producers, consumers and the offsets watcher against the replicas."""

    urls: list[str]
    api_key: str
    recorder: Recorder
    config: Config
    stop: threading.Event = field(default_factory=threading.Event)
    consumers_stop: threading.Event = field(default_factory=threading.Event)
    lookup: str | None = None
    lag: dict[str, int] = field(default_factory=dict)
    clients: list[httpx.AsyncClient] = field(default_factory=list)
    bootstraps: list[str] = field(default_factory=list)  # each replica's Kafka listener

    # ---- plumbing -------------------------------------------------------------------------

    def open_clients(self) -> None:
        """One HTTP client per replica."""
        headers = {"Authorization": f"Bearer {self.api_key}"}
        timeout = httpx.Timeout(self.config.request_timeout_s)
        self.clients = [
            httpx.AsyncClient(base_url=u, headers=headers, timeout=timeout) for u in self.urls
        ]

    async def close_clients(self) -> None:
        """Close the HTTP clients."""
        for client in self.clients:
            await client.aclose()

    def ops(self) -> int:
        """Operations recorded so far."""
        return len(self.recorder.events) // 2

    def running(self) -> bool:
        """Whether producers should go on."""
        return not (self.stop.is_set() and self.ops() >= self.config.min_ops)

    async def call(
        self, replica: int, method: str, path: str, body: Any = None
    ) -> tuple[str, httpx.Response | None, str]:
        """One request: outcome (by transport only), response, and a short reason."""
        try:
            response = await self.clients[replica].request(method, path, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return FAIL, None, type(exc).__name__  # never sent
        except httpx.HTTPError as exc:
            return UNKNOWN, None, type(exc).__name__
        return (OK if response.is_success else FAIL), response, str(response.status_code)

    async def until_ok(
        self, method: str, path: str, body: Any = None, tries: int = 240
    ) -> httpx.Response:
        """Retry a setup or final-read call on any replica until it succeeds (faults have healed)."""
        for attempt in range(tries):
            outcome, response, _ = await self.call(attempt % len(self.urls), method, path, body)
            if response is not None and (outcome == OK or response.status_code == 409):
                return response
            await asyncio.sleep(0.5)
        raise RuntimeError(f"{method} {path} never succeeded")

    # ---- set-up ---------------------------------------------------------------------------

    async def setup(self) -> None:
        """Create both topics and their groups (from the earliest offset)."""
        self.lookup = await resolve.lookup_path(self.clients[0])
        for topic, delivery in DELIVERY.items():
            body = {"name": topic, "delivery": delivery, "partitions": PARTITIONS}
            await self.until_ok("POST", "/v1/topics", body)
            self.recorder.instant("topic", "setup", topic=topic, delivery=delivery)
            config = {
                "startFrom": "earliest",
                "ackTimeout": "10s",
                "sessionTimeout": "15s",
                "deadLetter": {"maxRetries": 1000, "retryDelay": "1s"},
            }
            await self.until_ok("PUT", f"/v1/topics/{topic}/groups/{group_of(topic)}", config)

    # ---- producers ------------------------------------------------------------------------

    async def producer(self, number: int) -> None:
        """Publish until told to stop."""
        rng = random.Random(self.config.seed * 1000 + number)
        seq = 0
        while self.running():
            topic = rng.choice([EO, ALO])
            size = rng.randint(2, 5) if rng.random() < self.config.batch_ratio else 1
            keyed = rng.random() < self.config.keyed_ratio
            pids = [payload_id(keyed, number, seq + i) for i in range(size)]
            seq += size
            key = rng.choice([None, None, "a", "b", "c", "d"])
            await self.publish_with_retries(rng, f"p{number}", topic, pids, keyed, key)

    async def publish_with_retries(
        self,
        rng: random.Random,
        process: str,
        topic: str,
        pids: list[str],
        keyed: bool,
        key: str | None,
    ) -> None:
        """Publish, retrying a failed or unknown outcome where a retry cannot duplicate wrongly."""
        retryable = keyed or topic == ALO
        replica = rng.randrange(len(self.urls))
        for attempt in range(1, MAX_ATTEMPTS + 1):
            outcome = await self.publish(process, replica, topic, pids, keyed, key, attempt)
            if outcome == OK or not retryable or not self.running():
                return
            resolvable = outcome == UNKNOWN and keyed and topic == EO and self.lookup
            if resolvable and await self.resolve_unknown(process, replica, topic, pids, attempt):
                return
            replica = (replica + 1) % len(self.urls)
            await asyncio.sleep(rng.uniform(0.1, 0.5) * attempt)

    async def publish(
        self, process: str, replica: int, topic: str, pids: list[str], keyed: bool,
        key: str | None, attempt: int,
    ) -> str:  # fmt: skip
        """One publish request (single or batch), recorded."""
        items = [{"pid": pid, "ikey": pid if keyed else None} for pid in pids]
        messages = [_message(item, key, attempt) for item in items]
        batch = len(messages) > 1
        path = f"/v1/topics/{topic}/messages" + ("/batch" if batch else "")
        body = {"messages": messages} if batch else messages[0]
        op = self.recorder.invoke(
            "publish", process, topic=topic, items=items, attempt=attempt, replica=replica, key=key
        )
        outcome, response, reason = await self.call(replica, "POST", path, body)
        outcome, results, code = _publish_outcome(outcome, response, batch)
        self.recorder.complete(op, outcome, results=results, status=reason, code=code)
        return outcome

    async def resolve_unknown(
        self, process: str, replica: int, topic: str, pids: list[str], attempt: int
    ) -> bool:
        """Ask the server whether every message of an unknown publish was written."""
        assert self.lookup is not None
        written = True
        for pid in pids:
            op = self.recorder.invoke("resolve", process, topic=topic, pid=pid, attempt=attempt)
            answer = await resolve.resolve(self.clients[replica], self.lookup, topic, pid)
            self.recorder.complete(op, OK if answer else UNKNOWN, **(answer or {}))
            written = written and bool(answer and answer["written"])
        return written

    # ---- consumers ------------------------------------------------------------------------

    async def pull_member(self, topic: str) -> None:
        """A member that long-polls, acks, and sometimes nacks."""
        member = Member(self, topic, f"pull-{topic}")
        while not self.consumers_stop.is_set():
            if not await member.ensure_joined():
                continue
            await member.heartbeat_if_due()
            path = f"{member.base}/members/{member.member_id}/pull"
            op = self.recorder.invoke(
                "deliver", member.process, topic=topic, group=member.group, via="pull",
                waitMs=PULL_WAIT_MS,
            )  # fmt: skip
            outcome, response, reason = await self.call(
                member.replica, "POST", path, {"maxMessages": 50, "waitMs": PULL_WAIT_MS}
            )
            messages = _messages(response) if outcome == OK else []
            self.recorder.complete(op, outcome, messages=messages, status=reason)
            await member.after(outcome, response)
            await member.settle(messages)

    async def sse_member(self, topic: str) -> None:
        """A member that reads an SSE stream, acks in batches, and sometimes nacks."""
        member = Member(self, topic, f"sse-{topic}")
        while not self.consumers_stop.is_set():
            if not await member.ensure_joined():
                continue
            beat = asyncio.create_task(member.heartbeats())
            stream = asyncio.create_task(self.stream_once(member))
            try:
                while not stream.done():
                    await asyncio.wait({stream}, timeout=0.5)
                    if (self.consumers_stop.is_set() or member.must_rejoin) and not stream.done():
                        # An idle stream only sends keep-alive comments; a delivery the server
                        # was sending meanwhile is lost with the connection.
                        stream.cancel()
                        self.recorder.instant(
                            "deliver", member.process, UNKNOWN, topic=member.topic,
                            group=member.group, via="sse", status="closed by the client",
                        )  # fmt: skip
            finally:
                for task in (beat, stream):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def stream_once(self, member: Member) -> None:
        """Read one stream connection until it ends, fails, or the member must rejoin."""
        path = f"{member.base}/members/{member.member_id}/stream"
        client = self.clients[member.replica]
        timeout = httpx.Timeout(self.config.request_timeout_s, read=20)
        pending: list[dict[str, Any]] = []
        try:
            async with client.stream("GET", path, timeout=timeout) as response:
                if response.status_code != 200:
                    await response.aread()
                    self.recorder.instant(
                        "deliver",
                        member.process,
                        FAIL,
                        topic=member.topic,
                        group=member.group,
                        via="sse",
                        status=response.status_code,
                    )
                    await member.after(FAIL, response)
                    return
                async for kind, data in _sse_events(response):
                    if kind == "error":
                        member.member_id = None
                        break
                    message = _message_view(data)
                    self.recorder.instant(
                        "deliver",
                        member.process,
                        topic=member.topic,
                        group=member.group,
                        via="sse",
                        messages=[message],
                    )
                    pending.append(message)
                    if member.must_rejoin or self.consumers_stop.is_set():
                        break  # after recording what did arrive: it was delivered
                    if len(pending) >= 20:
                        await member.settle(pending)
                        pending = []
        except httpx.HTTPError as exc:
            self.recorder.instant(
                "deliver",
                member.process,
                UNKNOWN,
                topic=member.topic,
                group=member.group,
                via="sse",
                status=type(exc).__name__,
            )
            member.replica = (member.replica + 1) % len(self.urls)
            await asyncio.sleep(0.3)
        await member.settle(pending)
        if member.must_rejoin:
            member.member_id = None

    # ---- offsets --------------------------------------------------------------------------

    async def watch_offsets(self) -> None:
        """Read every group's committed offsets twice a second."""
        rng = random.Random(self.config.seed)
        while not self.consumers_stop.is_set():
            for topic in DELIVERY:
                await self.read_offsets(topic, rng.randrange(len(self.urls)))
            await asyncio.sleep(0.5)

    async def read_offsets(self, topic: str, replica: int, final: bool = False) -> bool:
        """One recorded read of a group's committed offsets; updates the known lag."""
        group = group_of(topic)
        op = self.recorder.invoke("offsets", "watcher", topic=topic, group=group, final=final)
        outcome, response, reason = await self.call(
            replica, "GET", f"/v1/topics/{topic}/groups/{group}/offsets"
        )
        rows = response.json()["partitions"] if outcome == OK and response is not None else []
        committed = {str(r["partition"]): r["current"] for r in rows}
        start = dict.fromkeys(committed, 0)
        self.recorder.complete(op, outcome, committed=committed, start=start, status=reason)
        if outcome == OK:
            self.lag[topic] = sum(r["lag"] for r in rows)
        return outcome == OK

    # ---- the end --------------------------------------------------------------------------

    async def final_read(self) -> None:
        """Read every partition from offset 0 to its end: the ground truth."""
        for topic in DELIVERY:
            for partition in range(PARTITIONS):
                outcome, messages = await self.read_partition(topic, partition)
                self.recorder.instant(
                    "final", "checker", outcome, topic=topic, partition=partition, messages=messages
                )
            for _ in range(120):
                if await self.read_offsets(topic, 0, final=True):
                    break
                await asyncio.sleep(0.5)

    async def read_partition(self, topic: str, partition: int) -> tuple[str, list[dict[str, Any]]]:
        """Every stored message of one partition, as ``{offset, pid, a}``; a partition that
        cannot be read to its end (after a minute of retries) is what could be read: ``fail``."""
        found: list[dict[str, Any]] = []
        offset = 0
        while True:
            path = f"/v1/topics/{topic}/partitions/{partition}/messages?offset={offset}&limit=1000"
            try:
                page = (await self.until_ok("GET", path, tries=120)).json()
            except RuntimeError:
                return FAIL, found
            for message in page["messages"]:
                data = message["data"]
                found.append({"offset": message["offset"], "pid": data["pid"], "a": data["a"]})
            if page["nextOffset"] >= page["latestOffset"] or not page["messages"]:
                return OK, found
            offset = page["nextOffset"]


class Member:
    """A consumer group member's state: its id, replica, heartbeat schedule."""

    def __init__(self, workload: Workload, topic: str, process: str) -> None:
        self.w, self.topic, self.process = workload, topic, process
        self.group = group_of(topic)
        self.base = f"/v1/topics/{topic}/groups/{self.group}"
        self.member_id: str | None = None
        self.replica = 0 if process.startswith("pull") else 1
        self.rng = random.Random(f"{workload.config.seed}-{process}")
        self.beat_s = 3.0
        self.next_beat_s = 0.0
        self.must_rejoin = False

    async def ensure_joined(self) -> bool:
        """Join (or rejoin) when needed; False after a failed attempt (after a pause)."""
        if self.member_id is not None and not self.must_rejoin:
            return True
        body = {"memberId": self.member_id} if self.member_id else {"clientId": self.process}
        op = self.w.recorder.invoke("join", self.process, topic=self.topic, group=self.group)
        outcome, response, reason = await self.w.call(
            self.replica, "POST", f"{self.base}/members", body
        )
        if outcome == OK and response is not None:
            joined = response.json()
            self.member_id, self.must_rejoin = joined["memberId"], False
            self.beat_s = joined["heartbeatIntervalMs"] / 1000
            self.w.recorder.complete(
                op,
                OK,
                member=self.member_id,
                generation=joined["generationId"],
                assignments=joined["assignments"],
            )
            return True
        self.w.recorder.complete(op, outcome, status=reason)
        if response is not None and response.status_code == 404:
            self.member_id = None
        await self.switch_and_pause()
        return False

    async def switch_and_pause(self) -> None:
        """After a failure: try the other replica, a little later."""
        self.replica = (self.replica + 1) % len(self.w.urls)
        await asyncio.sleep(self.rng.uniform(0.2, 0.6))

    async def heartbeat_if_due(self) -> None:
        """Heartbeat when the interval has passed."""
        now = asyncio.get_running_loop().time()
        if now >= self.next_beat_s:
            self.next_beat_s = now + self.beat_s
            await self.heartbeat()

    async def heartbeats(self) -> None:
        """Heartbeat forever (while a stream is open)."""
        while self.member_id is not None and not self.must_rejoin:
            await asyncio.sleep(self.beat_s)
            await self.heartbeat()

    async def heartbeat(self) -> None:
        """One recorded heartbeat; notes a needed rejoin."""
        path = f"{self.base}/members/{self.member_id}/heartbeat"
        op = self.w.recorder.invoke("heartbeat", self.process, topic=self.topic, group=self.group)
        outcome, response, reason = await self.w.call(self.replica, "POST", path)
        body = response.json() if outcome == OK and response is not None else {}
        self.w.recorder.complete(op, outcome, status=reason, **body)
        if body.get("shouldRejoin") or (response is not None and response.status_code == 404):
            self.must_rejoin = True

    async def after(self, outcome: str, response: httpx.Response | None) -> None:
        """React to a delivery call's outcome."""
        if outcome == OK:
            return
        if response is not None and response.status_code == 404:
            self.member_id = None
        await self.switch_and_pause()

    async def settle(self, messages: list[dict[str, Any]]) -> None:
        """Ack the messages in one call, nacking a few of them one by one."""
        nacks = [m for m in messages if self.rng.random() < self.w.config.nack_ratio]
        acks = [m["ackId"] for m in messages if m not in nacks]
        for message in nacks:
            body = {
                "ackId": message["ackId"],
                "error": "injected by the workload",
                "retryDelay": "1s",
            }
            op = self.w.recorder.invoke(
                "nack", self.process, topic=self.topic, group=self.group, ackId=message["ackId"]
            )
            outcome, _, reason = await self.w.call(self.replica, "POST", f"{self.base}/nack", body)
            self.w.recorder.complete(op, outcome, status=reason)
        if acks:
            await self.ack(acks)

    async def ack(self, ack_ids: list[str]) -> None:
        """One recorded ack call; ``acked`` lists the ids the server accepted."""
        op = self.w.recorder.invoke(
            "ack", self.process, topic=self.topic, group=self.group, ackIds=ack_ids
        )
        outcome, response, reason = await self.w.call(
            self.replica, "POST", f"{self.base}/ack", {"ackIds": ack_ids}
        )
        acked: list[str] = []
        if response is not None and response.status_code in {200, 409}:
            body = response.json()
            acked = body.get("acked", [])
            outcome = OK if response.status_code == 200 else FAIL
        self.w.recorder.complete(op, outcome, acked=acked, status=reason)


def _message(item: dict[str, Any], key: str | None, attempt: int) -> dict[str, Any]:
    message: dict[str, Any] = {"data": {"pid": item["pid"], "a": attempt}}
    if key is not None:
        message["key"] = key
    if item["ikey"] is not None:
        message["idempotencyKey"] = item["ikey"]
    return message


def _publish_outcome(
    outcome: str, response: httpx.Response | None, batch: bool
) -> tuple[str, list[dict[str, int]], str | None]:
    """Outcome of a publish: 2xx ok; a 503 saying "unknown", a 5xx other than 503, or a lost
    answer: unknown; any other answer (a 503 "nothing was written" included): fail."""
    if response is None:
        return outcome, [], None
    body = _json(response)
    if response.is_success:
        rows = body["results"] if batch else [body]
        return OK, [{"partition": r["partition"], "offset": r["offset"]} for r in rows], None
    code = body.get("error", {}).get("code") if isinstance(body, dict) else None
    if resolve.says_unknown(body) or (response.status_code >= 500 and response.status_code != 503):
        return UNKNOWN, [], code
    return FAIL, [], code


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {}


def _messages(response: httpx.Response | None) -> list[dict[str, Any]]:
    if response is None:
        return []
    return [_message_view(m) for m in response.json()["messages"]]


def _message_view(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "partition": m["partition"], "offset": m["offset"], "pid": m["data"]["pid"],
        "a": m["data"]["a"], "attempt": m["attempt"], "ackId": m["ackId"],
    }  # fmt: skip


async def _sse_events(response: httpx.Response) -> Any:
    """``(event type, data)`` of each event of an SSE response."""
    kind, data = "message", ""
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
        elif not line and data:
            yield kind, json.loads(data)
            kind, data = "message", ""


async def run_all(tasks: list[Callable[[], Coroutine[Any, Any, None]]]) -> None:
    """Run coroutines together; the first failure is raised after the others are cancelled."""
    async with asyncio.TaskGroup() as group:
        for task in tasks:
            group.create_task(task())
