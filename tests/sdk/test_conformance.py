"""Every scenario of sdk/conformance/scenarios.json, run with the Python SDK against the stack."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenants.models import NewOrganisation
from tests.sdk.conformance import StepFailed, run_scenario, scenarios

pytestmark = pytest.mark.e2e

SCENARIO_TIMEOUT_S = 90


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: s["name"])
def test_scenario(scenario: dict[str, Any], api: str, org: NewOrganisation) -> None:
    key = org.keys["production"].secret
    asyncio.run(asyncio.wait_for(run_scenario(scenario, api, key), SCENARIO_TIMEOUT_S))


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
