"""Schema fuzzing: schemathesis drives every operation of the served OpenAPI document against a
real ``queuecore serve`` process with a valid API key, and checks that no answer is a 5xx, that
every answer conforms to the document (status code, content type, body), and that every 4xx body
is the error envelope.

Bounded for CI (``QUEUECORE_FUZZ_EXAMPLES`` examples per operation, 8 by default); the long form
is ``QUEUECORE_FUZZ_EXAMPLES=200 .venv/bin/pytest tests/control_plane/test_schema_fuzz.py``.

The dashboard's HTML pages are not in the document (they are a browser UI behind a session
cookie and CSRF forms, tested in tests/control_plane/dashboard/), so they are not fuzzed here.
The push stream is excluded too: a well-formed request to it is an endless response.
"""

from __future__ import annotations

import os
import secrets
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tenants import service as tenants
from tenants.login_throttle import KEY_PREFIX
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation, run_in_tx

EXAMPLES = int(os.environ.get("QUEUECORE_FUZZ_EXAMPLES", "8"))
REQUEST_TIMEOUT_S = 40  # a long poll may wait 30 s by design
GENEROUS = {"publish_per_s": 100_000, "consume_per_s": 100_000, "admin_per_s": 100_000}


@dataclass(frozen=True)
class Playground:
    """A key whose rate limits the fuzzer will not reach, and real resources to aim at: a topic
    with messages, a group on it and a member of the group."""

    key: str
    topic: str
    group: str
    member_id: str

    def aim(self, case: Any) -> Any:
        """Point a generated request's path at the real resources (deletes stay random)."""
        real = {"topic": self.topic, "group": self.group, "member_id": self.member_id}
        params = case.path_parameters or {}
        if case.method.upper() != "DELETE":
            for name in params.keys() & real.keys():
                params[name] = real[name]
            if "partition" in params:
                params["partition"] = abs(int(params["partition"])) % 3
        return case


@pytest.fixture(scope="module")
def playground(services: Services, api: str) -> Iterator[Playground]:
    org = new_organisation(services.database_url, tier="enterprise")
    run_in_tx(
        services.database_url,
        lambda conn: tenants.set_tier(conn, org.organisation.id, "enterprise", GENEROUS),
    )
    key = org.keys["development"].secret
    topic, group = f"fuzz-{secrets.token_hex(4)}", "workers"
    with httpx.Client(base_url=api, headers=bearer(key), timeout=30) as http:
        assert http.post("/v1/topics", json={"name": topic}).status_code == 201
        batch = {"messages": [{"data": {"n": n}, "key": f"k{n}"} for n in range(30)]}
        assert http.post(f"/v1/topics/{topic}/messages/batch", json=batch).status_code == 201
        joined = http.post(f"/v1/topics/{topic}/groups/{group}/members", json={"clientId": "f"})
        assert joined.status_code in (200, 201), joined.text
    yield Playground(key, topic, group, joined.json()["memberId"])
    # The fuzzer's failed sign-ins must not throttle other tests' sign-ins from this address.
    with redis.Redis.from_url(services.redis_url) as client:
        client.delete(f"{KEY_PREFIX}:address:127.0.0.1")


@pytest.fixture(scope="module")
def served_schema(api: str) -> Any:
    """The document exactly as ``GET /schema/openapi.json`` serves it."""
    loaded = schemathesis.openapi.from_url(f"{api}/schema/openapi.json")
    return loaded.exclude(path_regex=r"/stream$")


def error_envelope(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx answer is ``{"error": {code, message, status, requestId}}`` with its status."""
    SEEN[f"{case.method} {case.path}"][response.status_code] += 1
    if not 400 <= response.status_code < 500:
        return None
    body = response.json()
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict), f"not the error envelope: {response.text[:300]}"
    assert {"code", "message", "status", "requestId"} <= set(error), error
    assert error["status"] == response.status_code, error
    return True


SEEN: defaultdict[str, Counter[int]] = defaultdict(Counter)  # operation -> status -> answers
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def fuzz(operation: Any, api: str, playground: Playground) -> None:
    """Run ``EXAMPLES`` generated requests against one operation; raise on the first failure.
    About half of them are aimed at the playground's real topic, group and member."""
    strategy = operation.as_strategy()

    @given(case=st.one_of(strategy, strategy.map(playground.aim)))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
    )
    def run(case: Any) -> None:
        case.call_and_validate(
            base_url=api,
            headers=bearer(playground.key),
            checks=CHECKS,
            additional_checks=[error_envelope],
            timeout=REQUEST_TIMEOUT_S,
        )

    run()


def test_every_operation_answers_as_documented(
    served_schema: Any, api: str, playground: Playground
) -> None:
    failures, fuzzed = [], 0
    for result in served_schema.get_all_operations():
        operation = result.ok()
        fuzzed += 1
        try:
            fuzz(operation, api, playground)
        except (Exception, BaseExceptionGroup) as exc:  # all operations run, all failures told
            failures.append(f"{operation.label}: {exc}")
    assert fuzzed >= 35, f"only {fuzzed} operations in the document"
    succeeded = [label for label, statuses in SEEN.items() if any(s < 300 for s in statuses)]
    print(
        f"fuzzed {fuzzed} operations, {sum(map(sum, (c.values() for c in SEEN.values())))} "
        f"answers; 2xx on {len(succeeded)}: {dict(SEEN)}"
    )
    assert len(succeeded) >= 5, f"the fuzzer hardly got past validation: {dict(SEEN)}"
    assert not failures, f"{len(failures)} of {fuzzed} operations failed:\n\n" + "\n\n".join(
        failures
    )
