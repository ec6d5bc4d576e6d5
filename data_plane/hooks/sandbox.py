"""Lua hooks in a sandbox (``lupa``, Lua 5.4): compiled when saved, cut off when they misbehave.

Each hook source gets a Lua state of its own (no hook sees another's globals), limited to
:data:`MAX_MEMORY_BYTES`, and each call to :data:`INSTRUCTION_BUDGET` VM instructions: a count
hook raises when it runs out. What a hook can reach is set by ``lua/sandbox.lua``: no ``os``,
``io``, ``require``, ``load``, ``debug`` or file access, nothing that could run long inside one
instruction. A hook that raises, runs out of instructions or memory, or returns something
unusable fails with :class:`HookFailed`; the callers then go on with the defaults.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from importlib import resources
from typing import Any

from core.errors import ValidationFailed

try:  # lupa ships one module per Lua version; 5.4 has the memory limit
    import lupa.lua54 as lua
except ImportError:  # pragma: no cover - lupa's wheels all carry lua54
    import lupa as lua

INSTRUCTION_BUDGET = 100_000  # per call: about a millisecond of Lua
MAX_MEMORY_BYTES = 4 * 1024 * 1024  # per hook's Lua state
MAX_SOURCE_CHARS = 16_384
MAX_CACHED = 1_000
SANDBOX_LUA = resources.files("data_plane.hooks").joinpath("lua", "sandbox.lua").read_text("utf-8")


class InvalidHook(ValidationFailed):
    """A hook's source does not compile, or does not define its function (422)."""

    code = "INVALID_HOOK"


class HookFailed(Exception):
    """A hook raised, ran out of its budget or memory, or returned something unusable."""


@dataclass(frozen=True, slots=True)
class LuaHook:
    """One compiled hook: call it with a Python mapping (it becomes a Lua table)."""

    function_name: str
    digest: str
    _runtime: Any
    _function: Any
    _sethook: Any
    _trip: Any

    def __call__(self, argument: dict[str, Any]) -> Any:
        """The hook's result (a Lua table or a plain value), or :class:`HookFailed`."""
        try:
            table = self._runtime.table_from(argument, recursive=True)
            self._sethook(self._trip, "", INSTRUCTION_BUDGET)
            try:
                return self._function(table)
            finally:
                self._sethook()
        except Exception as exc:  # LuaError, LuaMemoryError, a conversion error
            self._runtime.gccollect()
            raise HookFailed(_first_line(exc)) from None


def compile_hook(source: str, function_name: str, field: str) -> LuaHook:
    """``source`` compiled in a fresh sandbox, its top level run within the budget; it must
    define ``function_name``. :class:`InvalidHook` (422 ``INVALID_HOOK``) otherwise."""
    if len(source) > MAX_SOURCE_CHARS:
        raise InvalidHook(f"{field} is longer than {MAX_SOURCE_CHARS} characters", field=field)
    runtime = lua.LuaRuntime(
        max_memory=MAX_MEMORY_BYTES,
        register_eval=False,
        register_builtins=False,
        unpack_returned_tuples=False,
    )
    prepare, sethook, trip = runtime.execute(SANDBOX_LUA)
    chunk, sandbox = prepare(source, function_name)
    if chunk is None:
        raise InvalidHook(f"{field} does not compile: {sandbox}", field=field)
    sethook(trip, "", INSTRUCTION_BUDGET)
    try:
        chunk()
    except Exception as exc:
        raise InvalidHook(f"{field} failed when run: {_first_line(exc)}", field=field) from None
    finally:
        sethook()
    function = sandbox[function_name]
    if lua.lua_type(function) != "function":
        raise InvalidHook(f"{field} must define function {function_name}(msg)", field=field)
    return LuaHook(function_name, digest(source), runtime, function, sethook, trip)


def digest(source: str) -> str:
    """What a compiled hook is cached by."""
    return hashlib.sha256(source.encode()).hexdigest()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


class HookCache:
    """Compiled hooks of this process by source digest (compiling is ~0.3 ms and a Lua state)."""

    def __init__(self, max_entries: int = MAX_CACHED) -> None:
        self._hooks: OrderedDict[tuple[str, str], LuaHook] = OrderedDict()
        self._max = max_entries

    def get(self, source: str, function_name: str, field: str) -> LuaHook:
        """The compiled hook of ``source`` (compiled now if it is not cached)."""
        key = (digest(source), function_name)
        hook = self._hooks.get(key)
        if hook is None:
            hook = compile_hook(source, function_name, field)
            self._hooks[key] = hook
            if len(self._hooks) > self._max:
                self._hooks.popitem(last=False)
        else:
            self._hooks.move_to_end(key)
        return hook
