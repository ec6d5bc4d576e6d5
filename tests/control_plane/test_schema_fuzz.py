"""Schema fuzzing: schemathesis drives every operation of the served OpenAPI document against a
real ``queuecore serve`` process with a valid API key, with requests valid by the document
(positive data: none may be refused as invalid, so the document holds every rule the server
applies) and requests that break it (negative data: each must be refused), and checks that no
answer is a 5xx, that every answer conforms to the document (status code, content type, body),
and that every 4xx body is the error envelope. The push stream, whose well-formed request is an
endless response, is checked apart: it is served with the content type the document gives it.

Bounded for CI (``QUEUECORE_FUZZ_EXAMPLES`` examples per operation and kind of data, 8 by
default); the long form is
``QUEUECORE_FUZZ_EXAMPLES=200 .venv/bin/pytest tests/control_plane/test_schema_fuzz.py``.

The dashboard's HTML pages are not in the document (they are a browser UI behind a session
cookie and CSRF forms, tested in tests/control_plane/dashboard/), so they are not fuzzed here.
"""

from __future__ import annotations

import os
import re
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
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from control_plane.edge.openapi_rules import PARAMETERS
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
        """Point a generated request's path at the real resources (deletes stay random, and so
        does a path that breaks the document on purpose: that is what a negative case tests)."""
        real = {"topic": self.topic, "group": self.group, "member_id": self.member_id}
        params = case.path_parameters or {}
        if case.method.upper() != "DELETE" and all(map(documented, params.items())):
            for name in params.keys() & real.keys():
                params[name] = real[name]
            if "partition" in params:
                params["partition"] = abs(int(params["partition"])) % 3
        return case


def documented(parameter: tuple[str, Any]) -> bool:
    """Whether a path parameter's value is valid by the document's rule for it, if it has one."""
    name, value = parameter
    rule = PARAMETERS.get(name)
    if rule is None:
        return True
    if rule["type"] == "integer":
        return isinstance(value, int) and rule["minimum"] <= value <= rule["maximum"]
    text = str(value)
    return re.fullmatch(rule["pattern"], text) is not None and len(text) <= rule.get(
        "maxLength", len(text)
    )


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
    loaded.config.generation.update(with_security_parameters=False)  # the key is always sent
    return loaded.exclude(
        path_regex=r"/stream$"
    )  # endless: test_the_stream_is_served_as_documented


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
REFUSED_AS_INVALID = frozenset({400, 413, 415, 422})
# 422s that are not about the request's form: a rule of the caller's tier, and rules on the
# state of the resource, the clock or two fields together, which no JSON Schema can say (each
# is in its operation's description).
NOT_ABOUT_FORM = frozenset(
    {
        "QUOTA_EXCEEDED",
        "INVALID_HOOK",  # Lua source that does not compile: Lua's grammar, not a JSON Schema's
    }
)
GROUP = "/v1/topics/{topic}/groups/{group}"
BEYOND_A_SCHEMA = {
    ("POST /v1/keys", "expiresAt"),  # in the future
    (f"GET {GROUP}/offsets", "partition"),  # a partition of the topic
    (f"POST {GROUP}/offsets/seek", "partition"),
    (f"GET {GROUP}/dlq", "after"),  # a dead letter of the group
    (f"GET {GROUP}/lag", "since"),  # before until, at most 7 days before it
    ("GET /v1/usage", "from"),  # before to
    ("GET /v1/usage", "to"),  # at most a month of hours or a year of days after from
    ("PATCH /v1/topics/{topic}", "partitions"),  # not fewer than the topic has
}


def accepted_when_valid(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request valid by the document is never refused as invalid: the document carries every
    rule the server applies to a request's form."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if response.status_code not in REFUSED_AS_INVALID:
        return None
    error = response.json().get("error", {})
    if error.get("code") in NOT_ABOUT_FORM:
        return None
    fields = {detail.get("field") for detail in error.get("details", [])}
    if any((case.operation.label, field) in BEYOND_A_SCHEMA for field in fields):
        return None
    raise AssertionError(
        f"valid by the document but refused {response.status_code} {error.get('code')}: "
        f"{error.get('message')}; sent {case.path_parameters} {case.query} {case.body!r:.300}"
    )


COMMON_CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
CHECKS = {
    GenerationMode.POSITIVE: [*COMMON_CHECKS],
    GenerationMode.NEGATIVE: [*COMMON_CHECKS, negative_data_rejection],
}
EXTRA_CHECKS = {
    GenerationMode.POSITIVE: [error_envelope, accepted_when_valid],
    GenerationMode.NEGATIVE: [error_envelope],
}


def fuzz(operation: Any, api: str, playground: Playground, mode: GenerationMode) -> None:
    """Run ``EXAMPLES`` generated requests of ``mode`` against one operation; raise on the first
    failure. About half of them are aimed at the playground's real topic, group and member."""
    strategy = operation.as_strategy(generation_mode=mode)

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
            checks=CHECKS[mode],
            additional_checks=EXTRA_CHECKS[mode],
            timeout=REQUEST_TIMEOUT_S,
        )

    run()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_answers_as_documented(
    served_schema: Any, api: str, playground: Playground, mode: GenerationMode
) -> None:
    failures, fuzzed, unbreakable = [], 0, []
    SEEN.clear()
    for result in served_schema.get_all_operations():
        operation = result.ok()
        fuzzed += 1
        try:
            fuzz(operation, api, playground, mode)
        except Unsatisfiable as exc:
            if mode is GenerationMode.NEGATIVE:
                unbreakable.append(operation.label)  # no parameter or body with a rule to break
                continue
            failures.append(f"{operation.label}: {exc}")
        except (Exception, BaseExceptionGroup) as exc:  # all operations run, all failures told
            failures.append(f"{operation.label}: {exc}")
    assert fuzzed >= 35, f"only {fuzzed} operations in the document"
    succeeded = [label for label, statuses in SEEN.items() if any(s < 300 for s in statuses)]
    print(
        f"{mode.value}: fuzzed {fuzzed} operations, "
        f"{sum(map(sum, (c.values() for c in SEEN.values())))} answers; "
        f"2xx on {len(succeeded)}; nothing to break in {unbreakable}: {dict(SEEN)}"
    )
    assert fuzzed - len(unbreakable) >= 25, unbreakable  # the rest did get broken requests
    if mode is GenerationMode.POSITIVE:
        assert len(succeeded) >= 15, f"valid requests hardly ever succeeded: {dict(SEEN)}"
    assert not failures, f"{len(failures)} of {fuzzed} operations failed:\n\n" + "\n\n".join(
        failures
    )


def test_the_stream_is_served_as_documented(api: str, playground: Playground) -> None:
    """The push stream's 200 is the content type the document gives it (an endless response:
    only its head is read)."""
    document = httpx.get(f"{api}/schema/openapi.json", timeout=30).json()
    path = "/v1/topics/{topic}/groups/{group}/members/{member_id}/stream"
    documented = set(document["paths"][path]["get"]["responses"]["200"]["content"])
    assert documented == {"text/event-stream"}, documented
    group = f"stream-{secrets.token_hex(4)}"  # the fuzzer may have evicted the playground's member
    joined = httpx.post(
        f"{api}/v1/topics/{playground.topic}/groups/{group}/members",
        json={"clientId": "stream"},
        headers=bearer(playground.key),
        timeout=30,
    )
    assert joined.status_code in (200, 201), joined.text
    member = joined.json()["memberId"]
    url = f"{api}/v1/topics/{playground.topic}/groups/{group}/members/{member}/stream"
    with httpx.stream("GET", url, headers=bearer(playground.key), timeout=30) as response:
        assert response.status_code == 200
        served = response.headers["content-type"].split(";")[0].strip()
    assert served in documented
