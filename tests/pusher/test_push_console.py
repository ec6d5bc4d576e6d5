"""A push group on the console: its endpoint and recent failures, and the test push button,
against the real pusher and receiver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import Browser, add_member, env_url, text_of
from tests.pusher.conftest import Api, eventually
from tests.support.push_receiver import Receiver, Reply
from tests.support.services import Services

pytestmark = pytest.mark.e2e


def test_the_group_page_shows_the_endpoint_failures_and_sends_a_test_push(
    api: Api,
    org: NewOrganisation,
    client: TestClient,
    services: Services,
    receiver: Receiver,
    pusher: Path,
    unique: Callable[[str], str],
) -> None:
    topic = api.topic(unique("push-console"))
    path = f"/{topic}"
    receiver.scripts[path] = lambda _, before: Reply(500 if before == 0 else 200)
    dead_letter = {"maxRetries": 3, "retryDelay": "200ms"}
    secret = api.push_group(
        topic, "hooks", {"endpoint": receiver.url(path)}, deadLetter=dead_letter
    )
    message = api.publish(topic, {"n": 1})
    receiver.wait_for(path, 2)
    eventually(lambda: api.lag(topic, "hooks") == 0, what="the retry acked")

    owner = Browser(client)
    assert owner.login(org.owner_email).status_code == 303
    page_url = env_url(org, "production", "topics", topic, "groups", "hooks")
    page = owner.get(page_url)
    assert page.status_code == 200
    text = text_of(page)
    assert receiver.url(path) in text
    assert f"whsec_…{secret[-4:]}" in text and secret not in text
    assert message["messageId"] in text and "HTTP 500" in text and "retried" in text

    tested = owner.post(page_url + "/push/test")
    assert tested.status_code == 200, tested.text
    assert "Test push delivered: the endpoint answered 200" in text_of(tested)
    test_push = receiver.at(path)[-1]
    assert test_push.headers["queuecore-event"] == "push.test"
    assert test_push.signed_by(secret)
    assert test_push.json()["data"]["test"] is True

    receiver.scripts[path] = lambda *_: Reply(503)
    failed = owner.post(page_url + "/push/test")
    assert "Test push failed: HTTP 503" in text_of(failed)

    viewer = Browser(client)
    member = add_member(services.database_url, org, "viewer")
    assert viewer.login(member.email).status_code == 303
    assert "Send a test push" not in text_of(viewer.get(page_url))
    viewer.get(page_url)
    assert viewer.post(page_url + "/push/test").status_code == 403
