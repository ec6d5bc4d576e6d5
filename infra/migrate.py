"""Schema migrations: numbered SQL files in ``infra/migrations`` applied by yoyo-migrations.

yoyo records what it applied and guards with its own lock row; we also hold a PostgreSQL
advisory lock for the whole run, so replicas starting together apply each migration once, and a
lock row left behind by a migrator killed mid-run (yoyo's lock is a table row, not a session
lock) is cleared safely: while we hold the advisory lock, no other migrator can own it.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from yoyo import get_backend, read_migrations

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
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
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as guard:
        guard.execute("SELECT pg_advisory_lock(%s)", (_ADVISORY_KEY,))
        try:
            _clear_stale_yoyo_lock(guard)
            return _apply_unlocked(url)
        finally:
            guard.execute("SELECT pg_advisory_unlock(%s)", (_ADVISORY_KEY,))


def _clear_stale_yoyo_lock(conn: psycopg.Connection) -> None:
    exists = conn.execute("SELECT to_regclass('public.yoyo_lock') IS NOT NULL").fetchone()
    if exists and exists[0]:
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
