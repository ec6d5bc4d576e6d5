"""Against a real GreptimeDB, when one is configured: what ``queuecore serve`` exports lands there.

Set ``QUEUECORE_TEST_GREPTIMEDB_URL`` (e.g. ``http://127.0.0.1:4000``), and optionally
``QUEUECORE_TEST_GREPTIMEDB_DB`` (default ``public``) and ``QUEUECORE_TEST_GREPTIMEDB_AUTH``
(``user:password``). The test reads back through GreptimeDB's SQL HTTP API (``/v1/sql``).
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.observability.conftest import disconnect_mid_body, serve
from tests.observability.receiver import eventually
from tests.support.services import Services
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e

GREPTIMEDB_URL = os.environ.get("QUEUECORE_TEST_GREPTIMEDB_URL", "").rstrip("/")
DB = os.environ.get("QUEUECORE_TEST_GREPTIMEDB_DB", "public")
AUTH = os.environ.get("QUEUECORE_TEST_GREPTIMEDB_AUTH", "")


def _auth_headers() -> dict[str, str]:
    if not AUTH:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(AUTH.encode()).decode()}


def _sql(query: str) -> list[list[Any]]:
    """Rows of a query through GreptimeDB's HTTP SQL API."""
    response = httpx.post(
        f"{GREPTIMEDB_URL}/v1/sql",
        params={"db": DB},
        data={"sql": query},
        headers=_auth_headers(),
        timeout=10,
    )
    response.raise_for_status()
    output = response.json()["output"][0]
    return list(output.get("records", {}).get("rows", []))


@pytest.mark.skipif(
    not GREPTIMEDB_URL,
    reason="no GreptimeDB: set QUEUECORE_TEST_GREPTIMEDB_URL=http://host:4000 to run",
)
def test_metrics_logs_and_traces_land_in_greptimedb(
    services: Services, unique: Callable[[str], str], tmp_path: Path
) -> None:
    suffix = secrets.token_hex(4)
    service, log_table = f"queuecore-live-{suffix}", f"queuecore_live_logs_{suffix}"
    headers = [f"X-Greptime-DB-Name={DB}"]
    if AUTH:
        headers.append(f"Authorization={_auth_headers()['Authorization']}")
    env = {
        "QUEUECORE_OTLP_ENDPOINT": f"{GREPTIMEDB_URL}/v1/otlp",
        "QUEUECORE_OTLP_HEADERS": ",".join(headers),
        "QUEUECORE_OTLP_LOGS_HEADERS": f"X-Greptime-Log-Table-Name={log_table}",
        "QUEUECORE_OTLP_EXPORT_INTERVAL_MS": "1000",
        "QUEUECORE_SERVICE_NAME": service,
    }
    request_id = "req_" + secrets.token_hex(10)
    with serve(services, tmp_path / "serve.log", env) as server:
        org = new_organisation(services.database_url)
        secret = org.keys["production"].secret
        client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {secret}"}, timeout=30
        )
        topic = unique("live")
        assert client.post("/v1/topics", json={"name": topic}).status_code == 201
        for n in range(5):
            assert client.post(f"/v1/topics/{topic}/messages", json={"data": n}).status_code == 201
        disconnect_mid_body(server, f"/v1/topics/{topic}/messages", secret, request_id)
        assert server.stop() in (0, -signal.SIGTERM)  # the shutdown flush
    log = server.log.read_text(errors="replace")
    assert "Failed to export" not in log, log[-3000:]

    def logged() -> bool:
        rows = _sql(f"SELECT body, log_attributes FROM {log_table}")
        return any(request_id in str(row) for row in rows)

    eventually(logged, 30, "the request's log line in the log table")
    tables = {str(row[0]) for row in _sql("SHOW TABLES")}
    assert any("queuecore_messages_published" in table for table in tables), tables
    spans = _sql(f"SELECT count(*) FROM opentelemetry_traces WHERE service_name = '{service}'")
    assert spans and int(spans[0][0]) >= 5
    assert secret not in str(_sql(f"SELECT * FROM {log_table}"))
