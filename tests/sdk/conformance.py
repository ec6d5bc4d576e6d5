"""The Python interpreter of sdk/conformance/scenarios.json (see that directory's README)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import re
import secrets
import string
from contextlib import aclosing
from datetime import datetime
from pathlib import Path
from typing import Any

from queuecore import (
    UNSET,
    AckRejected,
    AsyncConsumer,
    AsyncMessage,
    AsyncQueueCore,
    DeadLetterPolicy,
    Fairness,
    FlowControl,
    LeaseExpired,
    PushConfig,
    QueueCoreError,
    verify_push,
)

SCENARIOS = Path(__file__).parents[2] / "sdk" / "conformance" / "scenarios.json"
INVALID_KEY = "pq_live_sk_" + "0" * 32
CLIENT_TIMEOUT_S = 10.0
DEFAULT_CONSUME_TIMEOUT_MS = 20000
_PLACEHOLDER = re.compile(r"\$([A-Za-z][A-Za-z0-9]*)")
_RENAMED = {"latencyMs": "latency"}


def scenarios() -> list[dict[str, Any]]:
    """Every scenario of the file."""
    return list(json.loads(SCENARIOS.read_text())["scenarios"])


class StepFailed(AssertionError):
    """A step's outcome did not match its ``expect``."""


def camel(name: str) -> str:
    """``message_id`` → ``messageId``."""
    head, *rest = name.split("_")
    joined = head + "".join(part.title() for part in rest)
    return _RENAMED.get(joined, joined)


def to_json(value: Any) -> Any:
    """An SDK result as the camelCase JSON the scenario file compares."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (f.name for f in dataclasses.fields(value) if not f.name.startswith("_"))
        return {camel(name): to_json(getattr(value, name)) for name in fields}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def error_json(exc: QueueCoreError) -> dict[str, Any]:
    """An SDK error as the API's error body."""
    return {
        "code": exc.code,
        "message": exc.message,
        "status": exc.status,
        "requestId": exc.request_id,
    }


class Run:
    """One run of one scenario: its unique suffix, its saved values, its clients."""

    def __init__(self, base_url: str, api_key: str, developer_key: str | None = None) -> None:
        self.suffix = "".join(secrets.choice(string.ascii_lowercase) for _ in range(8))
        self.saved: dict[str, Any] = {}
        self.clients = {
            None: AsyncQueueCore(api_key, base_url, timeout=CLIENT_TIMEOUT_S),
            "invalidKey": AsyncQueueCore(INVALID_KEY, base_url, timeout=CLIENT_TIMEOUT_S),
        }
        if developer_key is not None:
            self.clients["developer"] = AsyncQueueCore(
                developer_key, base_url, timeout=CLIENT_TIMEOUT_S
            )

    async def close(self) -> None:
        """Close the clients."""
        for client in self.clients.values():
            await client.close()

    def resolve(self, value: Any) -> Any:
        """``$word`` → ``word-<run>`` in strings, ``@name`` → the saved value."""
        if isinstance(value, str):
            if value.startswith("@"):
                return self.saved[value[1:]]
            return _PLACEHOLDER.sub(lambda m: f"{m.group(1)}-{self.suffix}", value)
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        return value

    async def step(self, step: dict[str, Any]) -> None:
        """Run one step and compare its outcome."""
        args, expect = self.resolve(step["args"]), self.resolve(step["expect"])
        client = self.clients[step.get("as")]
        try:
            result: Any = to_json(await OPS[step["op"]](client, args))
        except QueueCoreError as exc:
            if "error" not in expect:
                raise StepFailed(f"{step['op']} failed: {exc}") from exc
            check(error_json(exc), expect["error"], "error")
            return
        if "result" not in expect:
            raise StepFailed(f"{step['op']} succeeded ({result!r}) but should have failed")
        check(result, expect["result"], "result")
        for name, where in step.get("save", {}).items():
            self.saved[name] = dig(result, where)


def dig(value: Any, path: str) -> Any:
    """``results.0.offset`` of a JSON value."""
    for part in path.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def matches(value: Any, expected: Any) -> bool:
    """Whether ``value`` matches ``expected`` (see the README's rules)."""
    try:
        check(value, expected, "")
    except StepFailed:
        return False
    return True


def check(value: Any, expected: Any, where: str) -> None:
    """Raise :class:`StepFailed` naming the first place ``value`` differs from ``expected``."""
    if isinstance(expected, dict) and len(expected) == 1 and next(iter(expected)).startswith("$"):
        _check_matcher(value, *next(iter(expected.items())), where)
    elif isinstance(expected, dict):
        if not isinstance(value, dict):
            raise StepFailed(f"{where}: expected an object, got {value!r}")
        for key, wanted in expected.items():
            if key not in value:
                raise StepFailed(f"{where}.{key}: missing in {value!r}")
            check(value[key], wanted, f"{where}.{key}")
    elif isinstance(expected, list):
        if not isinstance(value, list) or len(value) != len(expected):
            raise StepFailed(f"{where}: expected {len(expected)} items, got {value!r}")
        for i, (item, wanted) in enumerate(zip(value, expected, strict=True)):
            check(item, wanted, f"{where}.{i}")
    elif value != expected or isinstance(value, bool) != isinstance(expected, bool):
        raise StepFailed(f"{where}: expected {expected!r}, got {value!r}")


_TYPES = {
    "string": str,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
    "null": type(None),
}


def _check_matcher(value: Any, name: str, arg: Any, where: str) -> None:
    ok = {
        "$startsWith": lambda: isinstance(value, str) and value.startswith(arg),
        "$contains": lambda: isinstance(value, str) and arg in value,
        "$type": lambda: (
            isinstance(value, _TYPES[arg]) and not (arg == "number" and isinstance(value, bool))
        ),
        "$includes": lambda: (
            isinstance(value, list) and all(any(matches(v, m) for v in value) for m in arg)
        ),
        "$excludes": lambda: (
            isinstance(value, list) and not any(matches(v, m) for v in value for m in arg)
        ),
        "$atMost": lambda: _number(value) and value <= arg,
        "$atLeast": lambda: _number(value) and value >= arg,
    }[name]()
    if not ok:
        raise StepFailed(f"{where}: {value!r} does not satisfy {name} {arg!r}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --- ops ---------------------------------------------------------------------------------------


async def _publish(pq: AsyncQueueCore, a: dict[str, Any]) -> Any:
    return await pq.publish(
        a["topic"],
        a["data"],
        key=a.get("key"),
        idempotency_key=a.get("idempotencyKey"),
        fairness_key=a.get("fairnessKey"),
        throttle_keys=a.get("throttleKeys"),
    )


async def _publish_batch(pq: AsyncQueueCore, a: dict[str, Any]) -> Any:
    from queuecore import OutgoingMessage

    items = [
        OutgoingMessage(
            m["data"],
            key=m.get("key"),
            fairness_key=m.get("fairnessKey"),
            throttle_keys=m.get("throttleKeys"),
        )
        for m in a["messages"]
    ]
    return await pq.publish_batch(a["topic"], items)


async def _deleted(done: Any) -> dict[str, bool]:
    await done
    return {"deleted": True}


async def _replayed(count: Any) -> dict[str, int]:
    return {"replayed": await count}


def _consumer(pq: AsyncQueueCore, a: dict[str, Any]) -> AsyncConsumer:
    dead = a.get("deadLetter")
    policy = None
    if dead is not None:
        policy = DeadLetterPolicy(dead.get("maxRetries"), dead.get("retryDelay"))
    return pq.consume(
        a["topic"],
        a["group"],
        start_from=a.get("startFrom"),
        dead_letter=policy,
        stream=a["mode"] == "stream",
        wait=1.0,
    )


async def _settle(message: AsyncMessage, action: str, error: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "messageId": message.message_id,
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "data": message.data,
        "key": message.key,
        "attempt": message.attempt,
    }
    if message.fairness_key is not None:
        entry["fairnessKey"] = message.fairness_key
    if action == "ack":
        await message.ack()
    elif action == "nack":
        await message.nack(error=error)
    elif action == "extend+ack":
        entry["extended"] = await message.extend(30)
        await message.ack()
    return entry


async def _consume(pq: AsyncQueueCore, a: dict[str, Any]) -> dict[str, Any]:
    consumer = _consumer(pq, a)
    events: list[str] = []
    for name in ("connected", "disconnected", "reconnecting", "rebalanced"):
        consumer.on(name, lambda *_, name=name: events.append(name))
    handled: list[dict[str, Any]] = []
    actions, count = a["actions"], a["count"]

    async def receive() -> None:
        async with aclosing(consumer.__aiter__()) as messages:
            async for message in messages:
                action = actions[min(len(handled), len(actions) - 1)]
                handled.append(await _settle(message, action, a.get("error")))
                if len(handled) >= count:
                    return

    try:
        await asyncio.wait_for(receive(), a.get("timeoutMs", DEFAULT_CONSUME_TIMEOUT_MS) / 1000)
    except TimeoutError:
        raise StepFailed(
            f"consume: {len(handled)} of {count} messages in time: {handled}"
        ) from None
    finally:
        await consumer.stop()
    handled.sort(key=lambda m: (m["partition"], m["offset"], m["attempt"]))
    return {"messages": handled, "events": events}


async def _publish_concurrently(pq: AsyncQueueCore, a: dict[str, Any]) -> dict[str, Any]:
    """``count`` publishes at once; what was stored, and how many requests carried them."""
    sent: list[str] = []
    original = pq._transport.request  # the runner counts the SDK's requests

    async def counted(method: str, path: str, **options: Any) -> Any:
        if method == "POST" and path.endswith(("/messages", "/messages/batch")):
            sent.append(path)
        return await original(method, path, **options)

    pq._transport.request = counted  # type: ignore[method-assign]
    try:
        calls = [
            pq.publish(a["topic"], {"n": n}, key=f"k{n % a['keys']}") for n in range(a["count"])
        ]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        pq._transport.request = original  # type: ignore[method-assign]
    stored = [(n, o) for n, o in enumerate(outcomes) if not isinstance(o, BaseException)]
    by_key: dict[int, list[int]] = {}
    for n, result in stored:
        by_key.setdefault(n % a["keys"], []).append(result.offset)
    return {
        "stored": len(stored),
        "distinct": len({(r.partition, r.offset) for _, r in stored}),
        "ordered": all(offsets == sorted(offsets) for offsets in by_key.values()),
        "requests": len(sent),
    }


async def _consume_counting(
    pq: AsyncQueueCore, a: dict[str, Any], work: Any
) -> tuple[collections.Counter[str], list[Exception]]:
    """Iterate a default consumer, ``work(message)`` each, until ``count`` distinct messages."""
    consumer = pq.consume(
        a["topic"],
        a["group"],
        start_from=a.get("startFrom"),
        ack_timeout=a.get("ackTimeout"),
        dead_letter=_policy(a.get("deadLetter")),
    )
    errors: list[Exception] = []
    consumer.on_error(errors.append)
    seen: collections.Counter[str] = collections.Counter()

    async def receive() -> None:
        async with aclosing(consumer.__aiter__()) as messages:
            async for message in messages:
                seen[message.message_id] += 1
                await work(message)
                if len(seen) >= a["count"]:
                    return

    try:
        await asyncio.wait_for(receive(), a.get("timeoutMs", DEFAULT_CONSUME_TIMEOUT_MS) / 1000)
    except TimeoutError:
        raise StepFailed(f"{len(seen)} of {a['count']} messages in time; errors {errors}") from None
    finally:
        await consumer.stop()
    return seen, errors


async def _consume_acking(pq: AsyncQueueCore, a: dict[str, Any]) -> dict[str, Any]:
    async def ack(message: AsyncMessage) -> None:
        await message.ack()

    seen, errors = await _consume_counting(pq, a, ack)
    refused = [e for e in errors if isinstance(e, QueueCoreError) and e.code == "ACK_REJECTED"]
    return {
        "acked": len(seen),
        "duplicates": sum(seen.values()) - len(seen),
        "refused": len(refused),
    }


async def _consume_slowly(pq: AsyncQueueCore, a: dict[str, Any]) -> dict[str, Any]:
    async def slow(message: AsyncMessage) -> None:
        await asyncio.sleep(a["handlerMs"] / 1000)
        await message.ack()

    seen, _ = await _consume_counting(pq, a, slow)
    return {"handled": len(seen), "duplicates": sum(seen.values()) - len(seen)}


async def _consume_with_stall(pq: AsyncQueueCore, a: dict[str, Any]) -> dict[str, Any]:
    """The first message held ``stallMs`` (past its lease) before its ack; the rest acked at once."""
    flow = FlowControl(max_messages=a["maxMessages"], max_lease_extension=a["maxLeaseExtension"])
    consumer = pq.consume(
        a["topic"],
        a["group"],
        start_from=a.get("startFrom"),
        ack_timeout=a.get("ackTimeout"),
        flow_control=flow,
    )
    errors: list[Exception] = []
    consumer.on_error(errors.append)
    seen: list[list[Any]] = []
    refused = False

    async def receive() -> None:
        nonlocal refused
        async with aclosing(consumer.__aiter__()) as messages:
            async for message in messages:
                seen.append([message.data, message.attempt])
                if len(seen) == 1:
                    await asyncio.sleep(a["stallMs"] / 1000)
                    try:
                        await message.ack_with_result()
                    except AckRejected as exc:
                        refused = "lease had ended" in exc.message
                else:
                    await message.ack()
                if len(seen) >= a["count"]:
                    return

    try:
        await asyncio.wait_for(receive(), a.get("timeoutMs", DEFAULT_CONSUME_TIMEOUT_MS) / 1000)
    except TimeoutError:
        raise StepFailed(f"{len(seen)} of {a['count']} messages in time: {seen}") from None
    finally:
        await consumer.stop()
    expired = any(isinstance(e, LeaseExpired) for e in errors)
    return {"seen": seen, "staleAckRefused": refused, "leaseExpiredReported": expired}


def _policy(dead: dict[str, Any] | None) -> DeadLetterPolicy | None:
    return (
        None if dead is None else DeadLetterPolicy(dead.get("maxRetries"), dead.get("retryDelay"))
    )


async def _configure(pq: AsyncQueueCore, a: dict[str, Any]) -> Any:
    options: dict[str, Any] = {
        "start_from": a.get("startFrom"),
        "dead_letter": _policy(a.get("deadLetter")),
        "rotate_secret": a.get("rotateSecret", False),
        "on_failure": a.get("onFailure", UNSET),
    }
    if "push" in a:
        push = a["push"]
        options["push"] = None if push is None else _push_config(push)
    fairness = a.get("fairness", UNSET)
    if isinstance(fairness, dict):
        fairness = Fairness(
            fairness.get("weights", {}),
            fairness.get("defaultWeight", 1),
            fairness.get("quantum", 1),
        )
    options["fairness"] = fairness
    group = await pq.consumer_groups.configure(a["topic"], a["group"], **options)
    return {**to_json(group), "config": group.raw_config}


def _push_config(push: dict[str, Any]) -> PushConfig:
    return PushConfig(
        push["endpoint"],
        max_in_flight=push.get("maxInFlight", 10),
        timeout=push.get("timeout", "30s"),
        ordered=push.get("ordered", False),
    )


async def _verify(_: AsyncQueueCore, a: dict[str, Any]) -> dict[str, Any]:
    message = verify_push(
        a["secret"], a["headers"], a["body"], tolerance=a.get("toleranceS", 300), now=a["now"]
    )
    return {k: v for k, v in to_json(message).items() if k != "timestamp"}


OPS: dict[str, Any] = {
    "publishConcurrently": _publish_concurrently,
    "consumeAcking": _consume_acking,
    "consumeSlowly": _consume_slowly,
    "consumeWithStall": _consume_with_stall,
    "health": lambda pq, a: pq.health(),
    "topics.create": lambda pq, a: pq.topics.create(
        a["name"],
        partitions=a.get("partitions"),
        retention=a.get("retention"),
        delivery=a.get("delivery"),
        on_enqueue=a.get("onEnqueue"),
    ),
    "topics.list": lambda pq, a: pq.topics.list(),
    "topics.describe": lambda pq, a: pq.topics.describe(a["name"]),
    "topics.delete": lambda pq, a: pq.topics.delete(a["name"]),
    "publish": _publish,
    "publishBatch": _publish_batch,
    "consume": _consume,
    "dlq.inspect": lambda pq, a: pq.dlq.inspect(a["topic"], a["group"], limit=a.get("limit", 100)),
    "dlq.replay": lambda pq, a: _replayed(pq.dlq.replay(a["topic"], a["group"], a["messageId"])),
    "dlq.replayAll": lambda pq, a: _replayed(
        pq.dlq.replay_all(a["topic"], a["group"], count=a.get("count"))
    ),
    "offsets.get": lambda pq, a: pq.offsets.get(a["topic"], a["group"], a["partition"]),
    "offsets.seek": lambda pq, a: pq.offsets.seek(
        a["topic"], a["group"], a["partition"], a["offset"]
    ),
    "offsets.reset": lambda pq, a: pq.offsets.reset(a["topic"], a["group"], a["to"]),
    "groups.list": lambda pq, a: pq.consumer_groups.list(a["topic"]),
    "groups.describe": lambda pq, a: pq.consumer_groups.describe(a["topic"], a["group"]),
    "groups.reset": lambda pq, a: pq.consumer_groups.reset_offsets(a["topic"], a["group"], a["to"]),
    "groups.configure": _configure,
    "groups.testPush": lambda pq, a: pq.consumer_groups.test_push(a["topic"], a["group"]),
    "push.verify": _verify,
    "groups.stats": lambda pq, a: pq.consumer_groups.stats(a["topic"], a["group"]),
    "config.set": lambda pq, a: pq.config.set(a["key"], a["value"]),
    "config.get": lambda pq, a: pq.config.get(a["key"]),
    "config.list": lambda pq, a: pq.config.list(a.get("prefix", "")),
    "config.delete": lambda pq, a: _deleted(pq.config.delete(a["key"])),
}


async def run_scenario(
    scenario: dict[str, Any], base_url: str, api_key: str, developer_key: str | None = None
) -> None:
    """Run every step of ``scenario``; the first mismatch raises :class:`StepFailed`."""
    run = Run(base_url, api_key, developer_key)
    try:
        for number, step in enumerate(scenario["steps"], 1):
            try:
                await run.step(step)
            except StepFailed as exc:
                raise StepFailed(f"step {number} ({step['op']}): {exc}") from exc
    finally:
        await run.close()
