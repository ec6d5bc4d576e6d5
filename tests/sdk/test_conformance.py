"""Every scenario of sdk/conformance/scenarios.json, run with the Python SDK against the stack."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenants.models import NewOrganisation
from tests.sdk.conformance import StepFailed, run_scenario, scenarios
from tests.support.services import Services
from tests.support.tenancy import new_organisation

pytestmark = pytest.mark.e2e

SCENARIO_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def developer(services: Services) -> NewOrganisation:
    """A Developer-tier organisation for the scenarios run ``as`` it."""
    return new_organisation(services.database_url, tier="developer")


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: s["name"])
def test_scenario(
    scenario: dict[str, Any], api: str, org: NewOrganisation, developer: NewOrganisation
) -> None:
    key, slow_key = org.keys["production"].secret, developer.keys["production"].secret
    run = run_scenario(scenario, api, key, slow_key)
    asyncio.run(asyncio.wait_for(run, SCENARIO_TIMEOUT_S))


def test_a_result_that_differs_from_the_scenario_fails_the_step(
    api: str, org: NewOrganisation
) -> None:
    wrong = {
        "name": "wrong",
        "steps": [
            {"op": "topics.create", "args": {"name": "$t", "partitions": 2}, "expect": {}},
            {
                "op": "topics.describe",
                "args": {"name": "$t"},
                "expect": {"result": {"partitions": 3}},
            },
        ],
    }
    wrong["steps"][0]["expect"] = {"result": {"partitions": 2}}
    with pytest.raises(StepFailed, match=r"step 2 \(topics.describe\): result.partitions"):
        asyncio.run(run_scenario(wrong, api, org.keys["production"].secret))
