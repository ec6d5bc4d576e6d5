"""Migrations: applied in order, recorded, once, even when several replicas start together."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from infra import migrate
from tests.support.services import Services


@pytest.fixture
def fresh_database(services: Services) -> Iterator[str]:
    """An empty database on the session's server, dropped afterwards."""
    name = f"mig_{secrets.token_hex(4)}"
    with psycopg.connect(services.database_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = services.database_url.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(services.database_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def all_migration_ids() -> list[str]:
    return sorted(
        path.stem
        for path in migrate.MIGRATIONS_DIR.glob("*.sql")
        if not path.stem.endswith(".rollback")
    )


def test_fresh_database_gets_every_migration_in_order(fresh_database: str) -> None:
    assert migrate.pending(fresh_database) == all_migration_ids()
    applied = migrate.apply(fresh_database)
    assert applied == all_migration_ids()
    assert migrate.pending(fresh_database) == []
    with psycopg.connect(fresh_database) as conn:
        rows = conn.execute(
            "SELECT migration_id FROM _yoyo_migration ORDER BY applied_at_utc"
        ).fetchall()
        assert [r[0] for r in rows] == all_migration_ids()
        assert conn.execute("SELECT instance_id FROM instance").fetchone()[0].startswith("qc_")


def test_second_apply_does_nothing(fresh_database: str) -> None:
    migrate.apply(fresh_database)
    with psycopg.connect(fresh_database) as conn:
        instance_before = conn.execute("SELECT instance_id FROM instance").fetchone()
    assert migrate.apply(fresh_database) == []
    with psycopg.connect(fresh_database) as conn:
        assert conn.execute("SELECT instance_id FROM instance").fetchone() == instance_before


def test_replicas_migrating_at_once_apply_each_migration_once(fresh_database: str) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: migrate.apply(fresh_database), range(4)))
    applied = [mid for result in results for mid in result]
    assert sorted(applied) == all_migration_ids()
    with psycopg.connect(fresh_database) as conn:
        assert conn.execute("SELECT count(*) FROM instance").fetchone()[0] == 1


def test_stale_lock_row_from_a_killed_migrator_does_not_block(fresh_database: str) -> None:
    migrate.apply(fresh_database)
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute("INSERT INTO yoyo_lock (locked, ctime, pid) VALUES (1, now(), 999999)")
    assert migrate.apply(fresh_database) == []
