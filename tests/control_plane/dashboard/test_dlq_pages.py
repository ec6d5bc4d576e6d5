"""The DLQ page: inspect page by page, replay one, replay all; roles, CSRF and isolation."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import (
    Browser,
    add_member,
    env_url,
    redirect_target,
    text_of,
)
from tests.data_plane.test_consume_api import Group
from tests.support.services import Services
from tests.support.tenancy import new_organisation


def dead_letter(group: Group, count: int) -> list[dict[str, Any]]:
    """Publish ``count`` messages, pull them and nack each (``maxRetries`` 0: straight to the DLQ)."""
    group.publish(*({"order": n} for n in range(count)))
    member = group.join()
    delivered: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while len(delivered) < count:
        assert time.monotonic() < deadline, f"only {len(delivered)} of {count} delivered"
        delivered += group.pull(member, max_messages=count - len(delivered), wait_ms=2000)
    for message in delivered:
        nacked = group.nack(
            message["ackId"], error=f"no stock for order {message['data']['order']}"
        )
        assert nacked.json()["deadLettered"] is True
    left = group.client.delete(f"{group.base}/members/{member}", headers=group.headers)
    assert left.status_code < 300, left.text
    return delivered


def depth_of(page: str) -> int:
    match = re.search(r'data-testid="dlq-depth">(\d+)<', page)
    assert match, page
    return int(match.group(1))


@pytest.fixture
def group(client: TestClient, org: NewOrganisation, unique: Callable[[str], str]) -> Group:
    return Group(client, org, unique, deadLetter={"maxRetries": 0})


def dlq_url(org: NewOrganisation, group: Group) -> str:
    return env_url(org, "production", "topics", group.topic, "groups", "workers", "dlq")


def test_the_queue_shows_each_dead_letter_with_why_page_by_page(
    owner: Browser, org: NewOrganisation, group: Group
) -> None:
    delivered = dead_letter(group, 23)
    first = owner.get(dlq_url(org, group))
    assert first.status_code == 200
    assert depth_of(first.text) == 23
    text = text_of(first)
    assert "no stock for order 0" in text and '{"order":0}' in text
    assert first.text.count('aria-label="Replay message ') == 20
    next_link = re.search(r'href="([^"]+)" rel="next">Next page', first.text)
    assert next_link
    second = owner.get(text_of_link(next_link.group(1)))
    assert second.status_code == 200
    assert second.text.count('aria-label="Replay message ') == 3
    assert 'rel="next"' not in second.text and "First page" in second.text
    shown = set(re.findall(r'aria-label="Replay message ([^"]+)"', first.text + second.text))
    assert shown == {message["messageId"] for message in delivered}


def text_of_link(href: str) -> str:
    return href.replace("&amp;", "&")


def test_replaying_one_and_then_all_empties_the_queue_and_redelivers(
    owner: Browser, org: NewOrganisation, group: Group
) -> None:
    delivered = dead_letter(group, 3)
    one = delivered[1]["messageId"]
    replayed = owner.post(f"{dlq_url(org, group)}/{one}/replay")
    assert redirect_target(replayed) == f"{dlq_url(org, group)}?notice=replayed&count=1"
    after_one = owner.get(redirect_target(replayed))
    assert "Replayed 1 dead-lettered message(s)" in after_one.text
    assert depth_of(after_one.text) == 2
    assert one not in after_one.text

    again = owner.post(f"{dlq_url(org, group)}/{one}/replay")
    assert again.status_code == 409
    assert "was replayed at" in text_of(again)
    assert depth_of(again.text) == 2

    everything = owner.post(f"{dlq_url(org, group)}/replay")
    assert redirect_target(everything).endswith("?notice=replayed&count=2")
    emptied = owner.get(redirect_target(everything))
    assert depth_of(emptied.text) == 0 and "The queue is empty." in emptied.text

    member = group.join()
    back: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while len(back) < 3:
        assert time.monotonic() < deadline, f"only {len(back)} of 3 replayed messages came back"
        back += group.pull(member, max_messages=10, wait_ms=5000)
    assert sorted(m["messageId"] for m in back) == sorted(m["messageId"] for m in delivered)
    assert {m["attempt"] for m in back} == {1}


def test_viewers_inspect_but_cannot_replay_developers_can(
    org: NewOrganisation, group: Group, services: Services, browser: Callable[[], Browser]
) -> None:
    [message] = dead_letter(group, 1)
    viewer, developer = browser(), browser()
    viewer.login(add_member(services.database_url, org, "viewer").email)
    developer.login(add_member(services.database_url, org, "developer").email)

    seen = viewer.get(dlq_url(org, group))
    assert seen.status_code == 200 and depth_of(seen.text) == 1
    assert "Replay all" not in seen.text and "can inspect dead letters but not replay" in seen.text
    for path in (
        f"{dlq_url(org, group)}/{message['messageId']}/replay",
        f"{dlq_url(org, group)}/replay",
    ):
        refused = viewer.post(path)
        assert refused.status_code == 403
        assert "to replay dead letters" in text_of(refused)
    assert depth_of(developer.get(dlq_url(org, group)).text) == 1

    assert redirect_target(developer.post(f"{dlq_url(org, group)}/replay")).endswith("count=1")
    assert depth_of(developer.get(dlq_url(org, group)).text) == 0


def test_replays_need_the_csrf_token(owner: Browser, org: NewOrganisation, group: Group) -> None:
    [message] = dead_letter(group, 1)
    for path in (
        f"{dlq_url(org, group)}/{message['messageId']}/replay",
        f"{dlq_url(org, group)}/replay",
    ):
        assert owner.post_without_csrf(path).status_code == 403
    assert depth_of(owner.get(dlq_url(org, group)).text) == 1


def test_another_organisations_queue_is_not_found(
    org: NewOrganisation, group: Group, services: Services, browser: Callable[[], Browser]
) -> None:
    [message] = dead_letter(group, 1)
    outsider = browser()
    outsider.login(new_organisation(services.database_url).owner_email)
    for response in (
        outsider.get(dlq_url(org, group)),
        outsider.post(f"{dlq_url(org, group)}/{message['messageId']}/replay"),
        outsider.post(f"{dlq_url(org, group)}/replay"),
    ):
        assert response.status_code == 404
        assert "no stock" not in response.text
    owner = browser()
    owner.login(org.owner_email)
    assert depth_of(owner.get(dlq_url(org, group)).text) == 1
