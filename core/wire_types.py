"""Constrained wire types shared by every request schema: text without NUL, 64-bit integers.

PostgreSQL text cannot hold a NUL character and its ``bigint`` stops at 2**63 - 1, so both are
refused when the body is decoded (a 422 naming the field), and the OpenAPI document says so.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

NO_NUL_PATTERN = r"^[^\x00]*$"
BIGINT_MAX = 2**63 - 1
INTEGER_MAX = 2**31 - 1  # PostgreSQL's ``integer``: partition numbers

Text = Annotated[str, msgspec.Meta(pattern=NO_NUL_PATTERN)]
"""Any text PostgreSQL can store: everything but the NUL character."""

Int64 = Annotated[int, msgspec.Meta(ge=-BIGINT_MAX - 1, le=BIGINT_MAX)]
"""An integer that fits PostgreSQL's ``bigint``."""

NonNegative64 = Annotated[int, msgspec.Meta(ge=0, le=BIGINT_MAX)]
"""A partition, an offset or a count: from 0 to the largest ``bigint``."""

Partition = Annotated[int, msgspec.Meta(ge=0, le=INTEGER_MAX)]
"""A partition number: from 0 to the largest PostgreSQL ``integer``."""


DURATION_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}


def duration_json_schema(low_ms: int, high_ms: int) -> dict[str, Any]:
    """What a duration field accepts, for the OpenAPI document (``msgspec.Meta``'s
    ``extra_json_schema``): ``"500ms"``, ``"30s"``, ``"5m"`` or ``"1h"`` within the bounds, or
    the milliseconds as an integer. Beside the field's ``anyOf``, ``pattern`` constrains its
    strings and ``minimum``/``maximum`` its integers."""
    alternatives = []
    for unit, unit_ms in DURATION_UNITS_MS.items():
        low, high = -(-low_ms // unit_ms), high_ms // unit_ms
        if low <= high:
            alternatives.append(range_pattern(low, high) + unit)
    return {
        "pattern": "^(?:" + "|".join(alternatives) + ")$",
        "minimum": low_ms,
        "maximum": high_ms,
    }


def has_nul(*values: str) -> bool:
    """Whether any of ``values`` holds a NUL character (which PostgreSQL text cannot store)."""
    return any("\x00" in value for value in values)


def range_pattern(low: int, high: int) -> str:
    """A regular expression (unanchored) for the decimal integers ``low`` to ``high`` (both
    non-negative), leading zeros allowed, as ``int()`` reads them."""
    if not 0 <= low <= high:
        raise ValueError(f"not a range of non-negative integers: {low}..{high}")
    parts: list[str] = []
    while low <= high:
        top = min(high, 10 ** len(str(low)) - 1)  # the same number of digits as low
        parts += _same_length(str(low), str(top))
        low = top + 1
    return "0*(?:" + "|".join(parts) + ")"


def _same_length(low: str, high: str) -> list[str]:
    """Alternatives for the integers from ``low`` to ``high``, written with as many digits."""
    if low == high:
        return [low]
    if len(low) == 1:
        return [f"[{low}-{high}]"]
    if low[0] == high[0]:
        return [low[0] + rest for rest in _same_length(low[1:], high[1:])]
    width = len(low) - 1
    parts, first, last = [], int(low[0]), int(high[0])
    if low[1:] != "0" * width:
        parts += [low[0] + rest for rest in _same_length(low[1:], "9" * width)]
        first += 1
    if high[1:] != "9" * width:
        last -= 1
    if first <= last:
        digit = str(first) if first == last else f"[{first}-{last}]"
        parts.append(digit + "[0-9]" * width)
    if high[1:] != "9" * width:
        parts += [high[0] + rest for rest in _same_length("0" * width, high[1:])]
    return parts
