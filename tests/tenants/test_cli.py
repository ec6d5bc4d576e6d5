"""``queuecore tenants …``: JSON out, keys that work against the API, one-line errors."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar.testing import TestClient

from infra.cli import main
from tenants.passwords import verify_password
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx

KEY_FORMAT = {
    "development": r"pq_test_sk_[0-9A-Za-z]{32}",
    "staging": r"pq_test_sk_[0-9A-Za-z]{32}",
    "production": r"pq_live_sk_[0-9A-Za-z]{32}",
}


def tenants_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    """Run ``queuecore tenants ARGS`` in this process: exit code, parsed stdout, stderr."""
    code = main(["tenants", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else out), err


def _email() -> str:
    return f"owner-{secrets.token_hex(4)}@example.com"


async def _password_hash(conn: Any, user_id: str) -> str:
    row = await (
        await conn.execute("SELECT password_hash FROM users WHERE id = %s", (user_id,))
    ).fetchone()
    return str(row["password_hash"])


def test_create_org_console_script_prints_one_json_object_whose_keys_work(
    services: Services, client: TestClient
) -> None:
    name, email = f"acme-{secrets.token_hex(3)}", _email()
    argv = ["tenants", "create-org", "--name", name, "--email", email, "--tier", "pro"]
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", *argv],
        env={**os.environ, **services.env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)  # the whole of stdout is one JSON object
    assert made["organisation"]["name"] == name
    assert made["organisation"]["tier"] == "pro"
    assert made["organisation"]["id"].startswith("org_")
    assert made["owner"]["email"] == email
    assert made["project"]["id"].startswith("prj_")
    assert set(made["environments"]) == set(made["keys"]) == set(KEY_FORMAT)
    for env, secret in made["keys"].items():
        assert re.fullmatch(KEY_FORMAT[env], secret)
        response = client.get("/v1/keys", headers=bearer(secret))
        assert response.status_code == 200, response.text
        listed = response.json()["keys"]
        assert [k["id"] for k in listed] == [made["environments"][env]["keyId"]]
        assert listed[0]["environmentId"] == made["environments"][env]["id"]
    # the generated owner password is printed once, and is the one stored
    password = made["owner"]["password"]
    assert len(password) >= 20
    stored = run_in_tx(services.database_url, lambda c: _password_hash(c, made["owner"]["id"]))
    assert verify_password(stored, password)


def test_create_org_with_given_password_does_not_echo_it(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    code, made, _ = tenants_cli(
        capsys, "create-org", "--name", "quiet", "--email", _email(), "--password", "s3cret-pass-1"
    )
    assert code == 0
    assert "password" not in made["owner"]
    assert made["organisation"]["tier"] == "developer"
    assert made["organisation"]["limits"]["admin_per_s"] == 10


def test_create_project_issues_a_key_per_environment_and_list_counts_it(
    services: Services, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    org = new_organisation(services.database_url)
    code, made, _ = tenants_cli(
        capsys, "create-project", "--org", org.organisation.id, "--name", "b"
    )
    assert code == 0
    assert [made["environments"][e]["id"][:4] for e in KEY_FORMAT] == ["env_"] * 3
    assert client.get("/v1/keys", headers=bearer(made["keys"]["staging"])).status_code == 200
    code, bare, _ = tenants_cli(
        capsys, "create-project", "--org", org.organisation.id, "--name", "c", "--no-keys"
    )
    assert code == 0 and bare["keys"] == {}
    code, listed, _ = tenants_cli(capsys, "list")
    mine = next(o for o in listed["organisations"] if o["id"] == org.organisation.id)
    assert mine["projectCount"] == 3 and mine["tier"] == "developer"


def test_create_key_with_scopes_and_expiry_then_revoke_it(
    services: Services, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    org = new_organisation(services.database_url)
    env_id = org.project.environment("production").id
    expires = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    args = ["--env", env_id, "--scopes", "publish,consume", "--name", "ci", "--expires-at", expires]
    code, key, _ = tenants_cli(capsys, "create-key", *args)
    assert code == 0
    assert datetime.fromisoformat(key["expiresAt"]) == datetime.fromisoformat(expires)
    assert re.fullmatch(KEY_FORMAT["production"], key["key"])
    assert key["scopes"] == ["publish", "consume"] and key["name"] == "ci"
    assert key["hint"] == f"…{key['key'][-4:]}"
    # valid, but without the admin scope that /v1/keys needs
    forbidden = client.get("/v1/keys", headers=bearer(key["key"]))
    assert forbidden.status_code == 403
    # the environment now has its two active keys
    code, out, err = tenants_cli(capsys, "create-key", "--env", env_id)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "KEY_LIMIT_REACHED" in err
    code, revoked, _ = tenants_cli(capsys, "revoke-key", "--env", env_id, "--key", key["id"])
    assert code == 0 and revoked["status"] == "revoked"
    code, fresh, _ = tenants_cli(capsys, "create-key", "--env", env_id, "--scopes", "admin")
    assert code == 0  # a slot is free again
    # never used before, so no replica has it cached: revocation is immediate
    code, _, _ = tenants_cli(capsys, "revoke-key", "--env", env_id, "--key", fresh["id"])
    response = client.get("/v1/keys", headers=bearer(fresh["key"]))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "INVALID_API_KEY"


def test_set_tier_and_enterprise_limits(
    services: Services, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    org = new_organisation(services.database_url)
    org_id = org.organisation.id
    limits = '{"admin_per_s": 25, "max_topics": 5000}'
    code, out, _ = tenants_cli(
        capsys, "set-tier", "--org", org_id, "--tier", "enterprise", "--limits", limits
    )
    assert code == 0 and out["appliedNow"] is True
    assert out["organisation"]["tier"] == "enterprise"
    assert out["organisation"]["limits"]["admin_per_s"] == 25
    assert out["organisation"]["limits"]["max_topics"] == 5000
    response = client.get("/v1/keys", headers=bearer(org.keys["development"].secret))
    assert response.headers["X-RateLimit-Limit"] == "25"
    code, listed, _ = tenants_cli(capsys, "list")
    mine = next(o for o in listed["organisations"] if o["id"] == org_id)
    assert mine["tier"] == "enterprise" and mine["customLimits"]["admin_per_s"] == 25


@pytest.mark.parametrize(
    ("args", "code_in_stderr"),
    [
        (["set-tier", "--org", "org_missing", "--tier", "pro"], "ORGANISATION_NOT_FOUND"),
        (["set-tier", "--org", "org_x", "--tier", "pro", "--limits", "{bad"], "VALIDATION_ERROR"),
        (["create-key", "--env", "env_missing"], "ENVIRONMENT_NOT_FOUND"),
        (["revoke-key", "--env", "env_missing", "--key", "key_x"], "KEY_NOT_FOUND"),
        (["create-org", "--name", "x", "--email", "not-an-email"], "VALIDATION_ERROR"),
    ],
)
def test_domain_errors_are_one_line_on_stderr_and_exit_1(
    services: Services, capsys: pytest.CaptureFixture[str], args: list[str], code_in_stderr: str
) -> None:
    code, out, err = tenants_cli(capsys, *args)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1 and code_in_stderr in err and "Traceback" not in err


def test_pro_limits_json_is_refused_for_non_enterprise(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    org = new_organisation(services.database_url)
    args = ["--org", org.organisation.id, "--tier", "pro", "--limits", '{"admin_per_s": 99}']
    code, _, err = tenants_cli(capsys, "set-tier", *args)
    assert code == 1 and "enterprise" in err


def test_missing_database_setting_exits_2(
    services: Services, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from core import settings

    monkeypatch.delenv("QUEUECORE_DATABASE_URL")
    settings.clear_caches()
    try:
        assert main(["tenants", "list"]) == 2
    finally:
        monkeypatch.undo()
        settings.clear_caches()
    assert "QUEUECORE_DATABASE_URL" in capsys.readouterr().err
