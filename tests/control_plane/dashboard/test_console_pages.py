"""The console's topic pages: traffic rates from known traffic, the message browser (by offset and
by time, paged), the test message form (roles, CSRF, limits) and tenant isolation."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from litestar.testing import TestClient

from data_plane.service import DataPlane
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


def cell(page: str, testid: str) -> str:
    """The text of the element with ``data-testid``."""
    match = re.search(rf'data-testid="{re.escape(testid)}"[^>]*>([^<]*)<', page)
    assert match, f"no {testid} on the page"
    return match.group(1).strip()


def offsets(page: str) -> list[int]:
    """The offsets of the browser's message rows, in order."""
    return [int(found) for found in re.findall(r'<tr data-offset="(\d+)">', page)]


def flush_traffic(client: TestClient) -> None:
    """Write the in-process API's traffic counts now (instead of within the flush interval)."""
    data_plane: DataPlane = client.app.state.data_plane
    assert client.blocking_portal is not None
    client.blocking_portal.call(data_plane.traffic_flusher.flush)


def api_browse(group: Group, partition: int, offset: int) -> list[dict[str, Any]]:
    """Messages as the REST browse API returns them."""
    response = group.client.get(
        f"/v1/topics/{group.topic}/partitions/{partition}/messages",
        params={"offset": offset},
        headers=group.headers,
    )
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


@pytest.fixture
def group(client: TestClient, org: NewOrganisation, unique: Callable[[str], str]) -> Group:
    """A production topic with one partition and the group ``workers``."""
    return Group(client, org, unique, partitions=1)


def topic_url(org: NewOrganisation, group: Group, *parts: str) -> str:
    return env_url(org, "production", "topics", group.topic, *parts)


def browse_url(org: NewOrganisation, group: Group, partition: int = 0) -> str:
    return topic_url(org, group, "partitions", str(partition), "messages")


def test_rates_show_what_was_published_and_consumed(
    owner: Browser, org: NewOrganisation, group: Group, client: TestClient
) -> None:
    empty = owner.get(topic_url(org, group))
    assert "No messages were published or consumed in this window" in empty.text
    group.publish(*[{"n": n} for n in range(5)])
    group.publish(*[{"n": n} for n in range(5, 7)])
    member = group.join()
    assert len(group.pull(member, max_messages=4)) == 4
    flush_traffic(client)

    for window in ("hour", "day"):
        page = owner.get(topic_url(org, group) + f"?window={window}")
        assert page.status_code == 200
        assert cell(page.text, "traffic-published") == "7"
        assert cell(page.text, "traffic-consumed") == "4"
        table = page.text.split('data-testid="traffic-table"', 1)[1].split("</table>", 1)[0]
        rows = re.findall(r'<td class="num">(\d+)</td><td class="num">[\d.]+</td>', table)
        assert sum(int(published) for published in rows[0::2]) == 7  # published column
        assert sum(int(consumed) for consumed in rows[1::2]) == 4  # consumed column
        svg = page.text.split("<svg", 1)[1].split("</svg>", 1)[0]
        assert 'class="line published"' in svg and 'class="line consumed"' in svg
        assert "aria-current" not in svg
    hour = owner.get(topic_url(org, group))
    points = re.search(r'class="line published" points="([^"]+)"', hour.text)
    assert points and len(points.group(1).split()) == 60  # one point a minute


def test_the_browser_pages_by_offset(owner: Browser, org: NewOrganisation, group: Group) -> None:
    group.publish(*[{"n": n} for n in range(25)])
    first = owner.get(browse_url(org, group))
    assert first.status_code == 200
    assert offsets(first.text) == list(range(20))
    assert '{"n":7}' in text_of(first)
    assert 'rel="prev"' not in first.text
    following = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert following
    second = owner.get(text_of_attr(following.group(1)))
    assert offsets(second.text) == list(range(20, 25))
    assert '{"n":24}' in text_of(second)
    assert 'rel="next"' not in second.text
    back = re.search(r'href="([^"]+)" rel="prev"', second.text)
    assert back and offsets(owner.get(text_of_attr(back.group(1))).text) == list(range(20))

    middle = owner.get(browse_url(org, group) + "?offset=10")
    assert offsets(middle.text) == list(range(10, 25))
    assert "?offset=0" in re.search(r'href="([^"]+)" rel="prev"', middle.text).group(1)  # type: ignore[union-attr]

    beyond = owner.get(browse_url(org, group) + "?offset=26")
    assert beyond.status_code == 416
    assert "valid offsets are 0..25" in text_of(beyond)
    assert owner.get(browse_url(org, group) + "?offset=abc").status_code == 422
    assert owner.get(browse_url(org, group, partition=1)).status_code == 404
    base = topic_url(org, group, "partitions")
    for partition in ("-1", "99999999999999999999", "abc"):
        refused = owner.get(f"{base}/{partition}/messages?at=2020-01-01T00:00")
        assert refused.status_code == 404, (partition, refused.status_code)
        assert "NOT_FOUND" in refused.text  # a page (or, for no route at all, the error body)


def text_of_attr(value: str) -> str:
    """An href as the browser follows it (entities decoded)."""
    return value.replace("&amp;", "&")


def test_the_browser_finds_messages_by_time(
    owner: Browser, org: NewOrganisation, group: Group
) -> None:
    early = group.publish(*[{"batch": "early", "n": n} for n in range(3)])
    time.sleep(1.2)
    between = datetime.now(UTC)
    time.sleep(1.2)
    late = group.publish(*[{"batch": "late", "n": n} for n in range(3)])
    assert [m["offset"] for m in early + late] == list(range(6))

    at = between.strftime("%Y-%m-%dT%H:%M:%S")
    page = owner.get(browse_url(org, group) + f"?at={at}")
    assert page.status_code == 200
    assert offsets(page.text) == [3, 4, 5]
    assert "is at offset 3" in text_of(page)
    assert '{"batch":"late","n":0}' in text_of(page)

    before = owner.get(browse_url(org, group) + "?at=2020-01-01T00:00")
    assert offsets(before.text) == list(range(6))
    after = owner.get(browse_url(org, group) + "?at=2099-01-01T00:00:00Z")
    assert after.status_code == 200 and offsets(after.text) == []
    assert "is at offset 6 (the end" in text_of(after)
    bad = owner.get(browse_url(org, group) + "?at=yesterday")
    assert bad.status_code == 422 and "at must be a date and time" in text_of(bad)


def test_a_test_message_is_published_and_shown_in_the_browser(
    owner: Browser, org: NewOrganisation, group: Group
) -> None:
    group.publish({"before": True})
    form = {"data": '{"hello": "console"}', "key": "user-7", "headers": "source=console\n\n a = b "}
    sent = owner.post(topic_url(org, group, "messages"), form)
    target = redirect_target(sent)
    assert target.startswith(browse_url(org, group) + "?")
    shown = owner.get(target)
    assert "The test message was stored at offset 1 of this partition." in text_of(shown)
    assert offsets(shown.text) == [1]
    row = text_of(shown).split('<tr data-offset="1">', 1)[1].split("</tr>", 1)[0]
    assert "user-7" in row and "source=console" in row and "a=b" in row
    assert '{"hello":"console"}' in row
    # the same message as the API stores and serves it
    [stored] = api_browse(group, 0, 1)
    assert stored["data"] == {"hello": "console"}
    assert stored["key"] == "user-7" and stored["headers"] == {"source": "console", "a": "b"}

    plain = owner.post(topic_url(org, group, "messages"), {"data": "not json", "key": ""})
    redirect_target(plain)
    assert api_browse(group, 0, 2)[0]["data"] == "not json"


@pytest.mark.parametrize(
    ("form", "status", "message"),
    [
        ({"data": "  "}, 422, "data is required"),
        ({"data": "1", "headers": "no equals sign"}, 422, "headers: line 1 is not name=value"),
        ({"data": '"' + "x" * (1024 * 1024) + '"'}, 413, "1048576"),  # the Pro tier's limit
    ],
)
def test_test_message_mistakes_are_explained_and_nothing_is_stored(
    owner: Browser,
    org: NewOrganisation,
    group: Group,
    form: dict[str, str],
    status: int,
    message: str,
) -> None:
    response = owner.post(topic_url(org, group, "messages"), form)
    assert response.status_code == status, response.text[:500]
    assert message in text_of(response)
    assert "Send a test message" in response.text  # the form, as typed
    assert api_browse(group, 0, 0) == []


def test_viewers_browse_but_cannot_send_and_forged_forms_send_nothing(
    org: NewOrganisation,
    group: Group,
    owner: Browser,
    services: Services,
    browser: Callable[[], Browser],
) -> None:
    group.publish({"n": 0})
    viewer = browser()
    viewer.login(add_member(services.database_url, org, "viewer").email)
    topic = viewer.get(topic_url(org, group))
    assert topic.status_code == 200 and "Send a test message" not in topic.text
    assert offsets(viewer.get(browse_url(org, group)).text) == [0]
    refused = viewer.post(topic_url(org, group, "messages"), {"data": "1"})
    assert refused.status_code == 403
    assert "you need to be an owner, admin or developer to send test messages" in text_of(refused)

    forged = owner.post_without_csrf(topic_url(org, group, "messages"), {"data": "1"})
    assert forged.status_code == 403
    assert len(api_browse(group, 0, 0)) == 1  # nothing new was stored


def test_another_organisations_or_environments_topic_is_not_found(
    owner: Browser, org: NewOrganisation, group: Group, services: Services
) -> None:
    group.publish({"secret": "payload"})
    other = new_organisation(services.database_url)
    outsider = Browser(owner.client)
    outsider.login(other.owner_email)
    staging = org.project.environment("staging").id
    production = org.project.environment("production").id
    for path in (browse_url(org, group), browse_url(org, group) + "?at=2020-01-01T00:00"):
        assert owner.get(path).status_code == 200
        refused = outsider.get(path)
        assert refused.status_code == 404 and "payload" not in refused.text
        assert owner.get(path.replace(production, staging)).status_code == 404
    sent = outsider.post(topic_url(org, group, "messages"), {"data": "1"})
    assert sent.status_code == 404
    assert (
        owner.post(
            topic_url(org, group, "messages").replace(production, staging), {"data": "1"}
        ).status_code
        == 404
    )
    assert len(api_browse(group, 0, 0)) == 1
