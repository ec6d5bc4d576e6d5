"""Invoices: a month of seeded usage priced as computed by hand, issued once however often the
job runs, numbered without gaps, immutable in the database, corrected by credit notes only,
served by ``GET /v1/invoices`` to the organisation's admin keys and nobody else."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from billing import invoicing
from core.db import connect
from core.errors import Conflict, ValidationFailed
from infra.celery_app import celery_app
from infra.cli import main
from tenants import service as tenants
from tenants.models import NewOrganisation
from tests.support.invoices import (
    EXPECTED_LINES,
    EXPECTED_TOTAL_CENTS,
    ISSUED_AT,
    issue,
    seed_month,
    seed_rollup,
)
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx
from tests.support.usage import insert_hourly

NUMBER = re.compile(r"^QC-2025-\d{6}$")


@pytest.fixture
def billed(services: Services) -> tuple[NewOrganisation, str]:
    """A Pro organisation with March 2025 seeded and invoiced; its invoice number."""
    org = new_organisation(services.database_url, tier="pro")
    seed_month(services.database_url, org)
    report = issue(services.database_url, org)
    assert len(report.issued) == 1 and report.existing == []
    return org, report.issued[0]


def get_invoice(url: str, number: str) -> Any:
    return run_in_tx(url, lambda conn: invoicing.get_invoice(conn, number, None))


def snapshot(url: str, organisation_id: str) -> list[Any]:
    """Every stored column of the organisation's documents and lines."""
    with connect(url) as conn:
        return conn.execute(
            "SELECT i.*, l.* FROM invoices i LEFT JOIN invoice_lines l ON l.invoice_id = i.id"
            " WHERE i.organisation_id = %s ORDER BY i.number, l.position",
            (organisation_id,),
        ).fetchall()


def test_a_month_of_seeded_usage_matches_the_hand_computed_invoice(
    services: Services, billed: tuple[NewOrganisation, str]
) -> None:
    org, number = billed
    invoice = get_invoice(services.database_url, number)

    assert NUMBER.match(number)
    assert (invoice.total_cents, invoice.currency, invoice.tier) == (
        EXPECTED_TOTAL_CENTS,
        "USD",
        "pro",
    )
    assert [(x.kind, x.environment, x.amount_cents) for x in invoice.lines] == EXPECTED_LINES
    production = invoice.lines[1]
    assert (production.project, production.messages_in, production.storage_gb_months) == (
        org.project.name,
        12_000_000,
        15.0,
    )
    assert (invoice.period_start.isoformat(), invoice.period_end.isoformat()) == (
        "2025-03-01",
        "2025-04-01",
    )
    assert invoicing.format_cents(invoice.total_cents) == "28.22 USD"


def test_rerunning_the_month_changes_nothing(
    services: Services, billed: tuple[NewOrganisation, str]
) -> None:
    org, number = billed
    before = snapshot(services.database_url, org.organisation.id)

    again = issue(services.database_url, org, datetime(2025, 5, 1, tzinfo=UTC))

    assert (again.issued, again.existing) == ([], [number])
    assert snapshot(services.database_url, org.organisation.id) == before


def test_numbers_have_no_gaps_per_series_and_year(
    services: Services, billed: tuple[NewOrganisation, str]
) -> None:
    with connect(services.database_url) as conn:
        rows = conn.execute(
            "SELECT i.series, i.year, count(*) AS n, max(i.sequence) AS top, c.last_sequence"
            " FROM invoices i JOIN invoice_counters c USING (series, year)"
            " GROUP BY i.series, i.year, c.last_sequence"
        ).fetchall()
    assert rows
    assert all(row["n"] == row["top"] == row["last_sequence"] for row in rows), rows


def test_two_runs_at_once_issue_one_invoice_and_waste_no_number(
    services: Services, billed: tuple[NewOrganisation, str]
) -> None:
    url = services.database_url
    org = new_organisation(url, tier="pro")
    seed_month(url, org)
    with connect(url) as holder:  # both runs queue on the counter row, then go one after the other
        holder.execute(
            "SELECT 1 FROM invoice_counters WHERE series = 'QC' AND year = 2025 FOR UPDATE"
        )
        with ThreadPoolExecutor(2) as pool:
            runs = [pool.submit(issue, url, org) for _ in range(2)]
            try:
                wait_until_blocked(url, 2)
            finally:
                holder.commit()
            reports = [run.result(timeout=60) for run in runs]

    assert sorted(len(r.issued) for r in reports) == [0, 1]
    assert {n for r in reports for n in r.issued + r.existing} == {
        n for r in reports for n in r.issued
    }
    test_numbers_have_no_gaps_per_series_and_year(services, billed)


def wait_until_blocked(url: str, count: int) -> None:
    """Until ``count`` sessions wait for a lock (the runs reached the counter row)."""
    deadline = time.monotonic() + 30
    with connect(url, autocommit=True) as conn:  # a transaction would see one stats snapshot
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()
            if row and row["n"] >= count:
                return
            time.sleep(0.05)
    raise AssertionError(f"{count} runs never waited on the counter row")


def test_the_invoice_waits_for_a_rollup_newer_than_the_months_usage(services: Services) -> None:
    url = services.database_url
    org = new_organisation(url, tier="pro")
    seed_month(url, org, rollup=False)
    assert issue(url, org).waiting == [org.organisation.id]  # never rolled up
    seed_rollup(url, org.project.id)
    staging = org.project.environment("staging").id
    insert_hourly(url, staging, datetime(2025, 3, 31, 23, tzinfo=UTC), admin_requests=1)
    assert issue(url, org).waiting == [org.organisation.id]  # usage changed after the rollup

    seed_rollup(url, org.project.id)
    report = issue(url, org)

    assert (report.waiting, len(report.issued)) == ([], 1)
    invoice = get_invoice(url, report.issued[0])
    assert invoice.lines[2].requests == 7_500_001


def test_a_month_not_over_cannot_be_invoiced(services: Services) -> None:
    org = new_organisation(services.database_url, tier="pro")
    with pytest.raises(ValidationFailed, match="can be invoiced from"):
        issue(services.database_url, org, datetime(2025, 4, 1, 2, tzinfo=UTC))


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE invoices SET total_cents = 1 WHERE number = %(n)s",
        "DELETE FROM invoices WHERE number = %(n)s",
        "UPDATE invoice_lines SET amount_cents = 0"
        " WHERE invoice_id = (SELECT id FROM invoices WHERE number = %(n)s)",
        "DELETE FROM invoice_lines WHERE invoice_id = (SELECT id FROM invoices WHERE number = %(n)s)",
        "INSERT INTO invoice_lines (invoice_id, position, kind, description, amount_cents)"
        " SELECT id, 99, 'usage', 'extra', 100 FROM invoices WHERE number = %(n)s",
        "TRUNCATE invoice_lines",
    ],
)
def test_an_issued_invoice_cannot_be_changed_in_the_database(
    services: Services, billed: tuple[NewOrganisation, str], statement: str
) -> None:
    _, number = billed
    with (
        connect(services.database_url) as conn,
        pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="issued"),
    ):
        conn.execute(statement, {"n": number})
    assert get_invoice(services.database_url, number).total_cents == EXPECTED_TOTAL_CENTS


def test_a_full_credit_note_negates_the_lines_and_leaves_the_invoice_as_it_was(
    services: Services, billed: tuple[NewOrganisation, str]
) -> None:
    _, number = billed
    before = get_invoice(services.database_url, number)
    at = datetime(2025, 4, 10, tzinfo=UTC)

    note = run_in_tx(
        services.database_url,
        lambda conn: invoicing.issue_credit_note(conn, number, "Outage on 5 March", at),
    )

    assert re.match(r"^CN-2025-\d{6}$", note.number)
    assert (note.kind, note.credits_number, note.reason) == (
        "credit_note",
        number,
        "Outage on 5 March",
    )
    assert [x.amount_cents for x in note.lines] == [-2500, -130, -192]
    assert note.total_cents == -EXPECTED_TOTAL_CENTS
    assert get_invoice(services.database_url, number) == before
    with pytest.raises(Conflict, match="credited in full"):
        run_in_tx(
            services.database_url,
            lambda conn: invoicing.issue_credit_note(conn, number, "again", at, amount_cents=1),
        )


def test_partial_credit_notes_never_credit_more_than_the_invoice(
    services: Services, billed: tuple[NewOrganisation, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, number = billed
    code = main(["billing", "credit-note", number, "--reason", "goodwill", "--amount-cents", "822"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert '"totalCents": -822' in out and f'"creditsNumber": "{number}"' in out

    too_much = main(["billing", "credit-note", number, "--reason", "x", "--amount-cents", "2001"])
    assert too_much == 1
    assert "amountCents must be 1 to 2000" in capsys.readouterr().err
    assert main(["billing", "credit-note", number, "--reason", "rest"]) == 0
    assert '"totalCents": -2000' in capsys.readouterr().out


def test_the_api_lists_and_shows_the_organisations_invoices_only(
    client: TestClient, services: Services, billed: tuple[NewOrganisation, str]
) -> None:
    org, number = billed
    headers = bearer(org.keys["development"].secret)  # invoices are per organisation

    listed = client.get("/v1/invoices", headers=headers)
    shown = client.get(f"/v1/invoices/{number}", headers=headers)

    assert listed.status_code == 200, listed.text
    assert [(i["number"], i["totalCents"]) for i in listed.json()["invoices"]] == [
        (number, EXPECTED_TOTAL_CENTS)
    ]
    body = shown.json()
    assert (body["currency"], body["periodStart"], body["kind"]) == ("USD", "2025-03-01", "invoice")
    assert [line["amountCents"] for line in body["lines"]] == [2500, 130, 192]
    assert body["lines"][2]["requests"] == 7_500_000

    other = new_organisation(services.database_url, tier="pro")
    other_headers = bearer(other.keys["production"].secret)
    refused = client.get(f"/v1/invoices/{number}", headers=other_headers)
    assert refused.status_code == 404
    error = refused.json()["error"]
    assert (error["code"], error["status"]) == ("INVOICE_NOT_FOUND", 404)
    assert error["requestId"].startswith("req_")
    assert client.get("/v1/invoices", headers=other_headers).json() == {"invoices": []}
    env = org.project.environment("production").id
    publisher = run_in_tx(
        services.database_url, lambda conn: tenants.create_key(conn, env, scopes=["publish"])
    )
    forbidden = client.get("/v1/invoices", headers=bearer(publisher.secret))
    assert forbidden.status_code == 403 and forbidden.json()["error"]["status"] == 403


def test_invoicing_is_on_the_beat_schedule_hourly(services: Services) -> None:
    app = celery_app()
    app.loader.import_default_modules()
    assert "billing.issue_invoices" in app.tasks
    (entry,) = [e for e in app.conf.beat_schedule.values() if e["task"] == "billing.issue_invoices"]
    assert entry["schedule"] <= 3600  # a month is invoiced within an hour of the 04:00 UTC mark


def test_the_beat_task_issues_on_a_worker_and_a_second_run_changes_nothing(
    celery_worker: Path, services: Services
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    seed_month(services.database_url, org)
    kwargs = {
        "month": "2025-03",
        "now": ISSUED_AT.isoformat(),
        "organisation_id": org.organisation.id,
    }

    first = celery_app().send_task("billing.issue_invoices", kwargs=kwargs).get(timeout=60)
    before = snapshot(services.database_url, org.organisation.id)
    second = celery_app().send_task("billing.issue_invoices", kwargs=kwargs).get(timeout=60)

    (number,) = first["issued"]
    assert first == {"month": "2025-03", "issued": [number], "existing": [], "waitingForRollup": []}
    assert second == {**first, "issued": [], "existing": [number]}
    assert snapshot(services.database_url, org.organisation.id) == before
    assert before[0]["total_cents"] == EXPECTED_TOTAL_CENTS


def test_the_scheduled_run_waits_until_the_previous_month_may_be_invoiced() -> None:
    from billing.tasks import issue_invoices

    early = issue_invoices.run(now=datetime(2025, 4, 1, 1, tzinfo=UTC).isoformat())
    assert early == {"month": "2025-03", "skipped": "the month may not be invoiced yet"}


def test_the_command_issues_a_month_once_and_refuses_a_bad_month(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    seed_month(services.database_url, org)
    args = ["billing", "issue-invoices", "--month", "2025-03", "--org", org.organisation.id]

    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)

    (number,) = first["issued"]
    assert (second["issued"], second["existing"]) == ([], [number])
    assert get_invoice(services.database_url, number).total_cents == EXPECTED_TOTAL_CENTS
    assert main(["billing", "issue-invoices", "--month", "2025-13"]) == 1
    assert "VALIDATION_ERROR: month must be YYYY-MM" in capsys.readouterr().err
