"""The invoice pages: the list, one invoice, its CSV and its printable form, for owners and admins
of the organisation only."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, datetime

from tenants import service as tenants
from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import Browser, add_member, env_url, text_of
from tests.support.invoices import EXPECTED_TOTAL_CENTS, issue, seed_month, seed_rollup
from tests.support.services import Services
from tests.support.tenancy import new_organisation, run_in_tx
from tests.support.usage import insert_hourly


def invoices(org: NewOrganisation, *parts: str) -> str:
    return env_url(org, "production", "invoices", *parts)


def issued(services: Services, org: NewOrganisation) -> str:
    seed_month(services.database_url, org)
    return issue(services.database_url, org).issued[0]


def test_the_list_and_one_invoice_show_its_lines_and_total(
    owner: Browser, org: NewOrganisation, services: Services
) -> None:
    number = issued(services, org)

    listed = owner.get(invoices(org))
    shown = owner.get(invoices(org, number))

    assert listed.status_code == 200, listed.text
    assert number in text_of(listed) and "March 2025" in text_of(listed)
    assert shown.status_code == 200, shown.text
    text = text_of(shown)
    assert f"Invoice {number}" in text
    assert "28.22 USD" in text and "25.00 USD" in text and "1.92 USD" in text
    assert f"{org.project.name} / staging" in text
    assert 'aria-current="page">Invoices<' in shown.text


def test_the_csv_has_a_row_per_line_and_the_total(
    owner: Browser, org: NewOrganisation, services: Services
) -> None:
    number = issued(services, org)

    response = owner.get(invoices(org, number, "csv"))

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert f'filename="{number}.csv"' in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [(r["kind"], r["environment"], r["amount_cents"]) for r in rows] == [
        ("base", "", "2500"),
        ("usage", "production", "130"),
        ("usage", "staging", "192"),
        ("total", "", str(EXPECTED_TOTAL_CENTS)),
    ]
    assert rows[1]["messages_in"] == "12000000" and rows[1]["storage_gb_months"] == "15.000000000"
    assert {r["currency"] for r in rows} == {"USD"}


def test_a_project_name_is_never_a_spreadsheet_formula_in_the_csv(
    owner: Browser, org: NewOrganisation, services: Services
) -> None:
    project = run_in_tx(
        services.database_url,
        lambda conn: tenants.create_project(conn, org.organisation.id, "=HYPERLINK(1)"),
    )
    env = project.environment("production").id
    insert_hourly(services.database_url, env, datetime(2025, 3, 2, tzinfo=UTC), messages_in=1)
    seed_rollup(services.database_url, project.id)
    number = issued(services, org)

    rows = list(csv.DictReader(io.StringIO(owner.get(invoices(org, number, "csv")).text)))

    assert "'=HYPERLINK(1)" in {r["project"] for r in rows}
    assert not any(r["project"].startswith("=") for r in rows)


def test_the_printable_form_is_the_invoice_alone_styled_for_print(
    owner: Browser, org: NewOrganisation, services: Services
) -> None:
    number = issued(services, org)

    page = owner.get(invoices(org, number, "print"))

    assert page.status_code == 200
    assert "invoice-print.css" in page.text and 'class="switcher"' not in page.text
    assert "28.22 USD" in text_of(page)
    css = owner.get("/dashboard/static/invoice-print.css")
    assert css.status_code == 200 and "@media print" in css.text


def test_only_owners_and_admins_see_invoices_and_other_organisations_never(
    org: NewOrganisation, services: Services, browser: Callable[[], Browser]
) -> None:
    number = issued(services, org)
    admin, developer, outsider = browser(), browser(), browser()
    admin.login(add_member(services.database_url, org, "admin").email)
    developer.login(add_member(services.database_url, org, "developer").email)
    other = new_organisation(services.database_url, tier="pro")
    outsider.login(other.owner_email)

    assert admin.get(invoices(org, number)).status_code == 200
    assert developer.get(invoices(org, number)).status_code == 403
    assert outsider.get(invoices(org, number)).status_code == 404  # not their environment
    # Through their own environment, the other organisation's number is not found either.
    for suffix in ("", "/csv", "/print"):
        own = env_url(other, "production", "invoices", number) + suffix
        assert outsider.get(own).status_code == 404, suffix
    assert number not in outsider.get(env_url(other, "production", "invoices")).text
