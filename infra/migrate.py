"""Schema migrations: numbered SQL files in ``infra/migrations`` applied by yoyo-migrations,
then the stored functions (one file each in a ``functions/`` folder beside the package that owns
them, ``CREATE OR REPLACE``).

Migrations hold the schema only; a function's definition is its file, applied after every run,
so it is read in one place instead of diffed across migrations.

A released function never changes under its name: replicas of the previous release keep calling
it during a rolling deploy (and after a rollback). A changed function is a new file under a new
name (``qc_pull_v2``), the statements call the new name, and the old file stays until no running
release calls it; a later migration then drops it. ``released_functions.json`` records each
released name with a digest of its body, and :func:`function_violations` (run by the tests)
refuses a body changed under a released name, a dropped name brought back, and a new function
not yet recorded.

yoyo records what it applied and guards with its own lock row; we also hold a PostgreSQL
advisory lock for the whole run, so replicas starting together apply each migration once, and a
lock row left behind by a migrator killed mid-run (yoyo's lock is a table row, not a session
lock) is cleared safely: while we hold the advisory lock, no other migrator can own it.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import psycopg
from yoyo import get_backend, read_migrations

from core.db import connect
from infra.layers import PACKAGES, ROOT

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
RELEASED_FUNCTIONS = Path(__file__).parent / "released_functions.json"
_ADVISORY_KEY = 0x51C0_0001  # any fixed number shared by every QueueCore process


def _yoyo_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"postgresql+psycopg://{rest}" if sep and scheme in {"postgresql", "postgres"} else url


def pending(url: str) -> list[str]:
    """Ids of migrations not yet applied."""
    backend = get_backend(_yoyo_url(url))
    try:
        return [m.id for m in backend.to_apply(read_migrations(str(MIGRATIONS_DIR)))]
    finally:
        backend.connection.close()


def apply(url: str) -> list[str]:
    """Apply every pending migration in order; returns the ids applied by this call."""
    with connect(url, autocommit=True) as guard:
        guard.execute("SELECT pg_advisory_lock(%s)", (_ADVISORY_KEY,))
        try:
            _clear_stale_yoyo_lock(guard)
            applied = _apply_unlocked(url)
            apply_functions(guard)
            return applied
        finally:
            guard.execute("SELECT pg_advisory_unlock(%s)", (_ADVISORY_KEY,))


def function_paths() -> dict[str, Path]:
    """Each stored function's name and its file (``<package>/…/functions/<name>.sql``)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("functions/*.sql"):
            if path.stem in found:
                raise RuntimeError(f"two files define {path.stem}: {found[path.stem]}, {path}")
            found[path.stem] = path
    return dict(sorted(found.items()))


def function_files() -> dict[str, str]:
    """Each stored function's name and its file's text, in name order."""
    return {name: path.read_text() for name, path in function_paths().items()}


def body_digest(text: str) -> str:
    """A function file's digest: its SQL without full-line comments, blank space folded."""
    kept = (line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return hashlib.sha256(" ".join(" ".join(kept).split()).encode()).hexdigest()


def released_functions() -> dict[str, str]:
    """Every function name ever released, with its body's digest (``released_functions.json``)."""
    recorded: dict[str, str] = json.loads(RELEASED_FUNCTIONS.read_text())
    return recorded


def dropped_functions(migrations_dir: Path = MIGRATIONS_DIR) -> set[str]:
    """The functions a migration drops."""
    pattern = re.compile(r"DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?(\w+)", re.IGNORECASE)
    return {
        name.lower()
        for path in migrations_dir.glob("*.sql")
        for name in pattern.findall(path.read_text())
    }


def function_violations(
    files: dict[str, str], released: dict[str, str], dropped: set[str]
) -> list[str]:
    """What breaks the rule that a released function never changes under its name."""
    found = []
    for name, text in files.items():
        digest = body_digest(text)
        if name in dropped:
            found.append(f"{name} was dropped by a migration: a new definition needs a new name")
        elif name not in released:
            found.append(
                f'{name} is not recorded: add "{name}": "{digest}" to {RELEASED_FUNCTIONS.name}'
            )
        elif released[name] != digest:
            found.append(
                f"{name} changed under its released name: define it as a new function (a new file"
                f" and name), call that, and keep {name} until no running release calls it"
            )
    for name in released.keys() - files.keys() - dropped:
        found.append(f"{name} is released: keep its file until a migration drops it")
    return found


def apply_functions(conn: psycopg.Connection[Any]) -> None:
    """(Re)create every stored function from its file, in one transaction."""
    with conn.transaction():
        for text in function_files().values():
            conn.execute(text.encode())


def _clear_stale_yoyo_lock(conn: psycopg.Connection[Any]) -> None:
    exists = conn.execute("SELECT to_regclass('public.yoyo_lock') IS NOT NULL AS found").fetchone()
    if exists and exists["found"]:
        conn.execute("DELETE FROM yoyo_lock")


def _apply_unlocked(url: str) -> list[str]:
    backend = get_backend(_yoyo_url(url))
    try:
        migrations = read_migrations(str(MIGRATIONS_DIR))
        with backend.lock():
            todo = backend.to_apply(migrations)
            backend.apply_migrations(todo)
            return [m.id for m in todo]
    finally:
        backend.connection.close()
