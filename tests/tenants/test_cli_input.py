"""``queuecore tenants``: bad names are a one-line error and exit 2 with nothing written;
``set-tier`` works without Redis and says when the new tier applies."""

from __future__ import annotations

import secrets

import psycopg
import pytest

from core import settings
from infra.cli import main
from tests.support.services import Services
from tests.support.tenancy import new_organisation


def organisations_named(database_url: str, name: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM organisations WHERE name = %s", (name,))
        return int(row.fetchone()[0])  # type: ignore[index]


@pytest.mark.parametrize(
    "name", ["", "   ", "x" * 300, "nul\x00name"], ids=["empty", "blank", "300", "nul"]
)
def test_bad_org_name_is_one_line_exit_2_and_nothing_written(
    services: Services, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    email = f"owner-{secrets.token_hex(4)}@example.com"
    code = main(["tenants", "create-org", "--name", name, "--email", email])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "name" in err and "Traceback" not in err
    with psycopg.connect(services.database_url) as conn:
        users = conn.execute("SELECT count(*) FROM users WHERE email = %s", (email,))
        assert users.fetchone()[0] == 0  # type: ignore[index]
    if "\x00" not in name:  # PostgreSQL cannot even be asked about that one
        assert organisations_named(services.database_url, name) == 0


def test_bad_project_name_is_exit_2(services: Services, capsys: pytest.CaptureFixture[str]) -> None:
    org = new_organisation(services.database_url)
    code = main(["tenants", "create-project", "--org", org.organisation.id, "--name", " "])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "name" in err


def test_set_tier_without_redis_commits_and_says_when_it_applies(
    services: Services, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    org = new_organisation(services.database_url)
    monkeypatch.delenv("QUEUECORE_REDIS_URL", raising=False)
    settings.clear_caches()
    try:
        code = main(["tenants", "set-tier", "--org", org.organisation.id, "--tier", "pro"])
    finally:
        monkeypatch.undo()
        settings.clear_caches()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert '"appliedNow": false' in out and '"tier": "pro"' in out
    assert "QUEUECORE_REDIS_URL" in err and "Traceback" not in err
