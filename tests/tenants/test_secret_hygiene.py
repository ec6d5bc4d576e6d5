"""No API key, session token or password in clear: not in a server's logs, not in the database."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest
from psycopg import sql

from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, stop, wait_for
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

OWNER_PASSWORD = "correct-horse-battery"  # what tests.support.tenancy gives every owner
WRONG_PASSWORD = "wrong-horse-battery-staple"


@dataclass
class Traffic:
    """What a run against a logging server produced: secrets that must stay secret."""

    log: str
    key_secrets: list[str] = field(default_factory=list)
    other_secrets: list[str] = field(default_factory=list)
    used_key: str = ""
    session_token: str = ""
    set_cookie: str = ""


@pytest.fixture(scope="module")
def traffic(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Traffic:
    """Valid, revoked, malformed and unknown keys, key creation and logins against a DEBUG server."""
    log, port = tmp_path_factory.mktemp("hygiene") / "serve.log", free_port_block()
    env = {
        **services.env(),
        "QUEUECORE_HTTP_PORT": str(port),
        "QUEUECORE_HTTP_WORKERS": "1",
        "QUEUECORE_LOG_FORMAT": "json",
        "QUEUECORE_LOG_LEVEL": "DEBUG",
        "QUEUECORE_PUBLIC_URL": "https://queuecore.example",
    }
    proc = queuecore(["serve"], env, log)
    try:
        ready = f"http://127.0.0.1:{port}/readyz"
        wait_for(lambda: http_status(ready) == 200, 60, "serve ready", proc, log)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            result = _exercise(http, services)
    finally:
        stop(proc)  # also flushes last-used times and whatever the process still buffers
    result.log = log.read_text(errors="replace")
    return result


def _exercise(http: httpx.Client, services: Services) -> Traffic:
    org = new_organisation(services.database_url)
    result = Traffic(log="", key_secrets=[issued.secret for issued in org.keys.values()])
    admin = bearer(org.keys["production"].secret)
    assert http.get("/v1/keys", headers=admin).status_code == 200
    created = http.post("/v1/keys", json={"name": "hygiene"}, headers=admin).json()
    result.used_key = created["key"]
    assert http.get("/v1/keys", headers=bearer(created["key"])).status_code == 200
    assert http.delete(f"/v1/keys/{created['id']}", headers=admin).status_code == 200
    dev_admin = bearer(org.keys["development"].secret)
    never_used = http.post("/v1/keys", json={"name": "revoked"}, headers=dev_admin).json()
    assert http.delete(f"/v1/keys/{never_used['id']}", headers=dev_admin).status_code == 200
    result.key_secrets += [created["key"], never_used["key"]]
    _send_bad_keys(http, [created["key"], never_used["key"], org.keys["staging"].secret])
    _log_in_and_out(http, org.owner_email, result)
    return result


def _send_bad_keys(http: httpx.Client, secrets: list[str]) -> None:
    revoked, never_used, valid = secrets
    attempts = [
        bearer(never_used),  # revoked before it was ever cached
        bearer(valid + "x"),  # malformed: one character too many
        bearer(valid[:-1]),  # malformed: one too few
        bearer(valid.replace("pq_test_sk_", "pq_prod_sk_")),  # malformed: unknown prefix
        bearer("pq_live_sk_" + "Z" * 32),  # well formed, unknown
        {"Authorization": f"Basic {valid}"},  # wrong scheme
        {"Authorization": valid},  # no scheme
    ]
    for headers in attempts:
        response = http.get("/v1/keys", headers=headers)
        assert response.status_code == 401, (headers, response.text)
    # Revoked a moment ago: may still be served from this replica's 2 s cache, either way is fine.
    assert http.get("/v1/keys", headers=bearer(revoked)).status_code in {200, 401}


def _log_in_and_out(http: httpx.Client, email: str, result: Traffic) -> None:
    wrong = http.post("/auth/login", json={"email": email, "password": WRONG_PASSWORD})
    assert wrong.status_code == 401
    broken = f'{{"email": "{email}", "password": "{OWNER_PASSWORD}"'  # malformed JSON
    bad_json = http.post(
        "/auth/login", content=broken, headers={"Content-Type": "application/json"}
    )
    assert bad_json.status_code == 400
    login = http.post("/auth/login", json={"email": email, "password": OWNER_PASSWORD})
    assert login.status_code == 200, login.text
    result.set_cookie = login.headers["set-cookie"]
    result.session_token = login.cookies["qc_session"]
    csrf = login.json()["csrfToken"]
    cookie = {"Cookie": f"qc_session={result.session_token}"}
    assert http.get("/auth/session", headers=cookie).status_code == 200
    done = http.post("/auth/logout", headers={**cookie, "X-CSRF-Token": csrf})
    assert done.status_code == 204
    result.other_secrets += [OWNER_PASSWORD, WRONG_PASSWORD, result.session_token, csrf]


def test_the_server_logged_in_json_at_debug_level(traffic: Traffic) -> None:
    records = [json.loads(line) for line in traffic.log.splitlines() if line.startswith("{")]
    assert records, traffic.log[-2000:]
    assert any(record.get("level") == "debug" for record in records), traffic.log[-2000:]


def test_no_key_secret_or_password_appears_in_the_logs(traffic: Traffic) -> None:
    for secret in traffic.key_secrets:
        random_part = secret[-32:]  # the key without its public prefix
        assert random_part not in traffic.log, f"key …{secret[-4:]} is in the server log"
    for secret in traffic.other_secrets:
        assert secret not in traffic.log, "a password, session or CSRF token is in the server log"


def test_the_session_cookie_is_secure_behind_an_https_public_url(traffic: Traffic) -> None:
    attributes = {part.strip().lower() for part in traffic.set_cookie.split(";")}
    assert {"secure", "httponly", "samesite=lax", "path=/"} <= attributes, traffic.set_cookie


def test_no_secret_is_stored_in_clear_in_any_table(traffic: Traffic, services: Services) -> None:
    secrets = [*traffic.key_secrets, OWNER_PASSWORD, WRONG_PASSWORD, traffic.session_token]
    needles = {needle for secret in secrets for needle in (secret, secret.encode().hex())}
    needles |= {secret[-32:] for secret in traffic.key_secrets}
    found = tables_containing(services.database_url, needles)
    assert not found, f"secrets in clear in: {sorted(set().union(*found.values()))}"


def test_the_same_search_finds_the_key_hashes(traffic: Traffic, services: Services) -> None:
    digests = {hashlib.sha256(secret.encode()).hexdigest() for secret in traffic.key_secrets}
    found = tables_containing(services.database_url, digests)
    assert set(found) == digests
    assert all(tables == {"public.api_keys"} for tables in found.values()), found


def tables_containing(database_url: str, needles: Iterable[str]) -> dict[str, set[str]]:
    """For each needle found anywhere in the database (any column, as text), the tables holding it.

    A row cast to text renders every column, ``bytea`` as ``\\x`` + hex, so searching for the
    hex of a secret's bytes covers binary columns.
    """
    wanted = sorted(needles)
    found: dict[str, set[str]] = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        for schema, table in conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_type = 'BASE TABLE'"
            " AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall():
            query = sql.SQL(
                "SELECT n FROM unnest(%s::text[]) AS n"
                " WHERE EXISTS (SELECT 1 FROM {} AS t WHERE strpos(t::text, n) > 0)"
            ).format(sql.Identifier(schema, table))
            for (needle,) in conn.execute(query, (wanted,)).fetchall():
                found.setdefault(needle, set()).add(f"{schema}.{table}")
    return found
