"""The usage page: a month by UTC day with its totals, for owners and admins of the environment."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import Browser, add_member, env_url, text_of
from tests.support.services import Services
from tests.support.tenancy import new_organisation
from tests.support.usage import insert_hourly


def usage(org: NewOrganisation, month: str | None = None) -> str:
    return env_url(org, "production", "usage") + (f"?month={month}" if month else "")


def test_a_month_shows_its_days_and_totals_from_the_metered_hours(
    owner: Browser, org: NewOrganisation, services: Services
) -> None:
    env_id = org.project.environment("production").id
    for day, count in ((3, 120), (3, 30), (17, 50)):
        hour = datetime(2024, 3, day, 10 if count != 30 else 11, tzinfo=UTC)
        insert_hourly(services.database_url, env_id, hour, messages_in=count, bytes_in=count * 1000)
    insert_hourly(services.database_url, env_id, datetime(2024, 4, 1, tzinfo=UTC), messages_in=999)

    page = owner.get(usage(org, "2024-03"))

    assert page.status_code == 200, page.text
    text = text_of(page)
    assert 'data-testid="messages-in">200<' in page.text  # April's 999 is not March's
    table = text.split('data-testid="usage-days"', 1)[1]  # the chart has every day; the table
    assert "2024-03-03" in table and "2024-03-17" in table and "2024-03-04" not in table
    assert "2024-03-03 00:00 UTC: 150 in" in text  # the chart's tooltip for the 3rd
    assert "Tier: pro" in text
    empty = owner.get(usage(org, "2023-01"))
    assert 'data-testid="messages-in">0<' in empty.text and "No usage in this month." in text_of(
        empty
    )


def test_a_bad_month_is_explained(owner: Browser, org: NewOrganisation) -> None:
    response = owner.get(usage(org, "2024-13"))
    assert response.status_code == 422
    assert "from" in text_of(response)


def test_only_owners_and_admins_see_usage_and_other_organisations_never(
    org: NewOrganisation, services: Services, browser: Callable[[], Browser]
) -> None:
    admin, developer, outsider = browser(), browser(), browser()
    admin.login(add_member(services.database_url, org, "admin").email)
    developer.login(add_member(services.database_url, org, "developer").email)
    outsider.login(new_organisation(services.database_url).owner_email)
    assert admin.get(usage(org)).status_code == 200
    refused = developer.get(usage(org))
    assert refused.status_code == 403
    assert "to see the environment's usage" in text_of(refused)
    assert outsider.get(usage(org)).status_code == 404
