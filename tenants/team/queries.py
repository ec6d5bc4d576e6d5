"""The team store's SQL: one statement per ``.sql`` file in ``sql/``, read once, by name."""

from __future__ import annotations

import functools
from pathlib import Path

SQL_DIR = Path(__file__).parent / "sql"


@functools.cache
def sql(name: str) -> str:
    """The statement in ``sql/{name}.sql``."""
    return (SQL_DIR / f"{name}.sql").read_text()
