"""A topic's ``onEnqueue`` hook in the publish path: ``function on_enqueue(msg)`` with
``msg = {topic, key, headers, data}`` may return ``{fairness_key = "…", weight = n,
throttle_keys = {…}}``, which sets what the message did not set itself.

The hook runs only for topics that have one (a route without a hook costs a publish one
attribute check). A hook that fails — raises, runs out of its instruction budget or memory,
returns something unusable — leaves the message as published, and the failure is counted and
logged; a publish never fails because of its hook. One that keeps running out of its budget
is suspended for a while (its calls counted as failures without running), so a looping hook
costs a batch of a thousand messages a few milliseconds, not a thousand budgets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from data_plane.hooks.errors import HookErrors
from data_plane.hooks.sandbox import HookFailed, LuaHook, lua

ON_ENQUEUE = "on_enqueue"
MAX_KEY_CHARS = 200
MAX_THROTTLE_KEYS = 8
MAX_WEIGHT = 1000
SUSPEND_AFTER = 3  # failures in a row
SUSPEND_S = 10.0


@dataclass(frozen=True, slots=True)
class Assigned:
    """What a hook returned: each field None when it did not set it."""

    fairness_key: str | None = None
    weight: int = 0
    throttle_keys: tuple[str, ...] | None = None


@dataclass(slots=True)
class EnqueueHook:
    """One topic's compiled ``onEnqueue`` with its failure count."""

    topic_id: str
    topic: str
    hook: LuaHook
    errors: HookErrors
    _failures_in_a_row: int = 0
    _suspended_until: float = field(default=0.0)

    def assign(self, key: str | None, headers: dict[str, str], data: Any) -> Assigned | None:
        """What the hook assigns to a message, or None when it assigns nothing or failed."""
        now = time.monotonic()
        if now < self._suspended_until:
            self.errors.failed("onEnqueue", self.topic_id, "suspended after failing repeatedly")
            return None
        try:
            if isinstance(data, msgspec.Raw):  # a payload passed through undecoded
                data = msgspec.json.decode(data)
            result = self.hook({"topic": self.topic, "key": key, "headers": headers, "data": data})
            assigned = parse_assigned(result)
        except (HookFailed, msgspec.DecodeError) as exc:
            self._failures_in_a_row += 1
            if self._failures_in_a_row >= SUSPEND_AFTER:
                self._suspended_until, self._failures_in_a_row = now + SUSPEND_S, 0
            self.errors.failed("onEnqueue", self.topic_id, str(exc), topic=self.topic)
            return None
        self._failures_in_a_row = 0
        return assigned


def parse_assigned(result: Any) -> Assigned | None:
    """A hook's return value, checked: nil (nothing assigned) or the table the contract names."""
    if result is None:
        return None
    if lua.lua_type(result) != "table":
        raise HookFailed("on_enqueue must return a table or nil")
    fairness_key = result["fairness_key"]
    if fairness_key is not None and (
        not isinstance(fairness_key, str) or len(fairness_key) > MAX_KEY_CHARS
    ):
        raise HookFailed(f"fairness_key must be a string of at most {MAX_KEY_CHARS} characters")
    return Assigned(
        fairness_key, _weight(result["weight"]), _throttle_keys(result["throttle_keys"])
    )


def _weight(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_WEIGHT:
        raise HookFailed(f"weight must be a whole number from 1 to {MAX_WEIGHT}")
    return value


def _throttle_keys(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if lua.lua_type(value) != "table":
        raise HookFailed("throttle_keys must be a list of strings")
    keys = tuple(value.values())
    if len(keys) > MAX_THROTTLE_KEYS or not all(
        isinstance(k, str) and 0 < len(k) <= MAX_KEY_CHARS for k in keys
    ):
        raise HookFailed(
            f"throttle_keys must hold at most {MAX_THROTTLE_KEYS} strings of 1 to "
            f"{MAX_KEY_CHARS} characters"
        )
    return keys
