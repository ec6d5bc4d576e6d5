"""A group's ``onFailure`` hook, run when a message is nacked: ``function on_failure(msg)`` with
``msg = {topic, group, key, headers, attempt, error}`` returns ``{action = "retry", delay_ms = n}``
or ``{action = "dlq"}``. Without a hook, or when the hook fails (counted and logged), the group's
``deadLetter`` policy decides, as for any group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from data_plane.hooks.errors import HookErrors
from data_plane.hooks.sandbox import HookFailed, LuaHook, lua

ON_FAILURE = "on_failure"
MAX_DELAY_MS = 86_400_000  # as a group's retryDelay


@dataclass(frozen=True, slots=True)
class Decision:
    """Retry after ``delay_ms``, or dead-letter now."""

    action: Literal["retry", "dlq"]
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class FailureHook:
    """One group's compiled ``onFailure``."""

    group_id: str
    topic: str
    group: str
    hook: LuaHook
    errors: HookErrors

    def decide(
        self, key: bytes | None, headers: dict[str, str], attempt: int, error: str
    ) -> Decision | None:
        """The hook's decision, or None (the group's policy decides) when it failed."""
        argument = {
            "topic": self.topic,
            "group": self.group,
            "key": None if key is None else key.decode(errors="replace"),
            "headers": headers,
            "attempt": attempt,
            "error": error,
        }
        try:
            return parse_decision(self.hook(argument))
        except HookFailed as exc:
            self.errors.failed("onFailure", self.group_id, str(exc), group=self.group)
            return None


def parse_decision(result: Any) -> Decision:
    """The hook's table, checked."""
    if lua.lua_type(result) != "table":
        raise HookFailed("on_failure must return {action = 'retry' | 'dlq', delay_ms = n}")
    action = result["action"]
    if action == "dlq":
        return Decision("dlq")
    if action != "retry":
        raise HookFailed("on_failure's action must be 'retry' or 'dlq'")
    delay = result["delay_ms"] or 0
    if isinstance(delay, float) and delay.is_integer():
        delay = int(delay)
    if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay <= MAX_DELAY_MS:
        raise HookFailed(f"on_failure's delay_ms must be a whole number from 0 to {MAX_DELAY_MS}")
    return Decision("retry", delay)
