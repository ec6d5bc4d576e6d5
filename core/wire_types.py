"""Constrained wire types shared by every request schema: text without NUL, 64-bit integers.

PostgreSQL text cannot hold a NUL character and its ``bigint`` stops at 2**63 - 1, so both are
refused when the body is decoded (a 422 naming the field), and the OpenAPI document says so.
"""

from __future__ import annotations

from typing import Annotated

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


def has_nul(*values: str) -> bool:
    """Whether any of ``values`` holds a NUL character (which PostgreSQL text cannot store)."""
    return any("\x00" in value for value in values)
