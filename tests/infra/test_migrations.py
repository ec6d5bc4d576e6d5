"""Migrations: applied in order, recorded, once, even when several replicas start together."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from infra import migrate
from infra.layers import PACKAGES, ROOT
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


def function_bodies(url: str) -> dict[str, str]:
    """The body of every ``qc_`` function in the database, by name."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT proname, prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'public' AND proname LIKE 'qc\\_%'"
        ).fetchall()
    return dict(rows)


def file_body(text: str) -> str:
    """The body of a function file: what stands between its ``$$`` quotes."""
    return text.split("$$", 2)[1]


def test_the_database_functions_are_the_files(fresh_database: str) -> None:
    migrate.apply(fresh_database)
    files = migrate.function_files()
    assert sorted(files) == sorted(function_bodies(fresh_database))
    assert {name: file_body(text) for name, text in files.items()} == function_bodies(
        fresh_database
    )


def test_a_function_changed_by_hand_is_put_back_by_the_next_apply(fresh_database: str) -> None:
    migrate.apply(fresh_database)
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION qc_commit_progress(p_group_id text, p_partitions integer[])"
            " RETURNS TABLE (partition integer, committed_offset bigint) LANGUAGE sql"
            " AS $$ SELECT 0, 0::bigint $$"
        )
    migrate.apply(fresh_database)
    expected = file_body(migrate.function_files()["qc_commit_progress"])
    assert function_bodies(fresh_database)["qc_commit_progress"] == expected


def test_migrations_hold_no_function_definitions() -> None:
    for path in migrate.MIGRATIONS_DIR.glob("*.sql"):
        assert "CREATE FUNCTION" not in path.read_text().upper().replace("OR REPLACE ", ""), path


# --- released functions never change under their name (rolling deploys) -----------------------


def test_no_released_function_changed_under_its_name() -> None:
    files = migrate.function_files()
    assert {"qc_pull", "qc_commit_flush", "qc_ack_ranges"} <= set(files)
    violations = migrate.function_violations(
        files, migrate.released_functions(), migrate.dropped_functions()
    )
    assert violations == []


def test_a_body_changed_under_a_released_name_is_refused_and_a_new_name_is_the_way() -> None:
    files = migrate.function_files()
    released = migrate.released_functions()
    changed = files["qc_pull"].replace("clock_timestamp()", "now()")
    assert changed != files["qc_pull"]

    refused = migrate.function_violations({**files, "qc_pull": changed}, released, set())
    assert [v.split(":")[0] for v in refused] == ["qc_pull changed under its released name"]

    renamed = changed.replace("FUNCTION qc_pull(", "FUNCTION qc_pull_v2(")
    recorded = {**released, "qc_pull_v2": migrate.body_digest(renamed)}
    assert migrate.function_violations({**files, "qc_pull_v2": renamed}, recorded, set()) == []
    # A comment is not the body: editing one needs no new name.
    commented = files["qc_pull"].replace("-- qc_pull:", "-- qc_pull (reworded):")
    assert migrate.function_violations({**files, "qc_pull": commented}, released, set()) == []


def test_a_released_function_stays_until_a_migration_drops_it_and_never_comes_back() -> None:
    files = migrate.function_files()
    released = migrate.released_functions()
    without = {name: text for name, text in files.items() if name != "qc_pull_state"}

    assert migrate.function_violations(without, released, set()) == [
        "qc_pull_state is released: keep its file until a migration drops it"
    ]
    assert migrate.function_violations(without, released, {"qc_pull_state"}) == []
    assert migrate.function_violations(files, released, {"qc_pull_state"})[0].startswith(
        "qc_pull_state was dropped"
    )


def test_every_function_a_statement_calls_is_defined_by_a_file_of_that_name() -> None:
    files = migrate.function_files()
    for name, text in files.items():
        assert f"FUNCTION {name}(" in text, f"{name}'s file defines another function"
    called = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.sql"):
            if "migrations" not in path.parts:
                called.update(re.findall(r"\b(qc_\w+)\s*\(", path.read_text()))
    assert {"qc_pull", "qc_commit_flush", "qc_ack_ranges"} <= called
    assert called - set(files) == set()
