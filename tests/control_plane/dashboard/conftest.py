"""Fixtures of the dashboard tests: browsers with their own cookies, signed-in owners."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import Browser
from tests.support.services import Services
from tests.support.tenancy import new_organisation


@pytest.fixture
def browser(client: TestClient) -> Iterator[Callable[[], Browser]]:
    """Makes browsers, each with its own cookie jar, on the shared in-process app."""
    yield lambda: Browser(client)
    client.cookies.clear()


@pytest.fixture
def org(services: Services) -> NewOrganisation:
    """A fresh Pro organisation (owner, default project, three environments, a key each)."""
    return new_organisation(services.database_url, tier="pro")


@pytest.fixture
def owner(org: NewOrganisation, browser: Callable[[], Browser]) -> Browser:
    """A browser signed in as the organisation's owner."""
    signed_in = browser()
    assert signed_in.login(org.owner_email).status_code == 303
    return signed_in
