"""Topic and group pages: list with depth, create with errors explained, describe with partitions
and groups, a group's members, partitions, dead letters and lag chart; roles and isolation."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

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
from tests.support.lag import group_ids, insert_point
from tests.support.services import Services
from tests.support.tenancy import new_organisation


def cell(page: str, testid: str) -> str:
    """The text of the element with ``data-testid``."""
    match = re.search(rf'data-testid="{re.escape(testid)}"[^>]*>([^<]*)<', page)
    assert match, f"no {testid} on the page"
    return match.group(1).strip()


@pytest.fixture
def group(client: TestClient, org: NewOrganisation, unique: Callable[[str], str]) -> Group:
    """A production topic (2 partitions) with the group ``workers``; a nack dead-letters."""
    return Group(client, org, unique, partitions=2, deadLetter={"maxRetries": 0})


def test_a_topic_created_on_the_page_is_listed_and_described(
    owner: Browser, org: NewOrganisation, unique: Callable[[str], str], client: TestClient
) -> None:
    name = f"orders.{unique('t')}"
    form = {"name": name, "partitions": "3", "retention": "2d", "delivery": "at-least-once"}
    created = owner.post(env_url(org, "production", "topics"), form)
    assert redirect_target(created) == env_url(org, "production", "topics", name) + (
        "?notice=topic-created"
    )
    described = owner.get(redirect_target(created))
    assert described.status_code == 200
    assert f"<h1>{name}</h1>" in described.text
    assert "The topic was created." in described.text
    assert described.text.count('<tr><td class="num">') == 3  # one row per partition
    assert "No consumer group reads this topic yet" in described.text

    listed = owner.get(env_url(org, "production", "topics"))
    row = listed.text.split(f">{name}</a>", 1)[1].split("</tr>", 1)[0]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
    assert cells[:5] == ["3", "2d", "at-least-once", "express", "0"], cells
    # the topic is real: the API sees it with the key of the same environment
    api = client.get(f"/v1/topics/{name}", headers=org_headers(org))
    assert api.status_code == 200 and api.json()["retention"] == "2d"


def org_headers(org: NewOrganisation) -> dict[str, str]:
    return {"Authorization": f"Bearer {org.keys['production'].secret}"}


@pytest.mark.parametrize(
    ("form", "status", "message"),
    [
        ({"name": "bad name!"}, 422, "may contain only letters, digits"),
        ({"partitions": "lots"}, 422, "partitions must be a whole number"),
        ({"partitions": "0"}, 422, "partitions: must be at least 1"),
        ({"partitions": "65"}, 422, "64"),  # the Pro tier's partition quota
        ({"retention": "forever"}, 422, "is not a positive duration"),
        ({"delivery": "maybe-once"}, 422, "delivery: must be one of"),
    ],
)
def test_topic_form_mistakes_are_explained_and_what_was_typed_is_kept(
    owner: Browser,
    org: NewOrganisation,
    unique: Callable[[str], str],
    form: dict[str, str],
    status: int,
    message: str,
) -> None:
    sent = {"name": unique("t"), "partitions": "2", "retention": "1d", **form}
    response = owner.post(env_url(org, "development", "topics"), sent)
    assert response.status_code == status, response.text
    assert message in text_of(response)
    assert f'value="{sent["name"]}"' in text_of(response)
    assert "No topics in this environment yet." in response.text


def test_a_taken_topic_name_is_a_conflict_on_the_page(
    owner: Browser, org: NewOrganisation, group: Group
) -> None:
    response = owner.post(env_url(org, "production", "topics"), {"name": group.topic})
    assert response.status_code == 409
    assert "already exists" in text_of(response)


def test_depth_lag_members_and_dead_letters_show_on_the_topic_and_group_pages(
    owner: Browser, org: NewOrganisation, group: Group
) -> None:
    group.publish({"n": 1}, {"n": 2}, {"n": 3}, key="one-partition")
    member = group.join(clientId="dash-test")
    first, second, _ = group.pull(member, max_messages=3)
    assert group.ack(first["ackId"]).status_code == 200
    assert group.nack(second["ackId"], error="bad payload").json()["deadLettered"] is True

    topics = owner.get(env_url(org, "production", "topics")).text
    assert cell(topics, f"depth-{group.topic}") == "3"
    topic = owner.get(env_url(org, "production", "topics", group.topic))
    assert cell(topic.text, "topic-depth") == "3"
    assert cell(topic.text, "group-lag-workers") == "1"  # high watermark 3, committed 2

    page = owner.get(env_url(org, "production", "topics", group.topic, "groups", "workers"))
    assert page.status_code == 200
    assert "<h1>Consumer group workers</h1>" in page.text
    assert member in page.text and "dash-test" in page.text
    partition = first["partition"]
    assert cell(page.text, f"partition-lag-{partition}") == "1"
    assert cell(page.text, "group-lag") == "1"
    assert cell(page.text, "dlq-depth") == "1"
    assert "No lag history yet" in page.text


def test_the_group_page_draws_the_lag_series(
    owner: Browser, org: NewOrganisation, group: Group, services: Services
) -> None:
    ids = group_ids(services.database_url, group.topic)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    for minutes_ago, lag in ((30, 10), (20, 40), (10, 25)):
        insert_point(services.database_url, ids, now - timedelta(minutes=minutes_ago), lag)
    page = owner.get(env_url(org, "production", "topics", group.topic, "groups", "workers"))
    assert page.status_code == 200
    svg = page.text.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert 'role="img"' in svg and ">40</text>" in svg  # the top gridline's label
    points = re.search(r'<polyline class="line lag" points="([^"]+)"', svg)
    assert points and len(points.group(1).split()) == 3
    heights = [float(pair.split(",")[1]) for pair in points.group(1).split()]
    assert heights[1] < heights[2] < heights[0]  # 40 is drawn highest, 10 lowest
    assert text_of(page).count('UTC</td><td class="num">') == 3  # and as a table


def test_viewers_see_topics_but_cannot_create_them_developers_can(
    org: NewOrganisation,
    services: Services,
    browser: Callable[[], Browser],
    unique: Callable[[str], str],
) -> None:
    viewer, developer = browser(), browser()
    viewer.login(add_member(services.database_url, org, "viewer").email)
    developer.login(add_member(services.database_url, org, "developer").email)
    url = env_url(org, "development", "topics")

    page = viewer.get(url)
    assert page.status_code == 200 and "Create a topic" not in page.text
    refused = viewer.post(url, {"name": unique("t")})
    assert refused.status_code == 403
    assert "you need to be an owner, admin or developer to create topics" in text_of(refused)

    assert "Create a topic" in developer.get(url).text
    assert developer.post(url, {"name": unique("t")}).status_code == 303


def test_topics_and_groups_of_another_environment_or_organisation_are_not_found(
    owner: Browser, org: NewOrganisation, group: Group, services: Services
) -> None:
    other = new_organisation(services.database_url)
    outsider = Browser(owner.client)
    outsider.login(other.owner_email)
    paths = [
        env_url(org, "production", "topics", group.topic),
        env_url(org, "production", "topics", group.topic, "groups", "workers"),
    ]
    for path in paths:
        assert owner.get(path).status_code == 200
        # the same topic through another environment of the same organisation
        assert owner.get(path.replace(*env_ids(org, "production", "staging"))).status_code == 404
        refused = outsider.get(path)
        assert refused.status_code == 404
        assert group.topic not in refused.text
    # and another organisation's environment id with its own topic name
    assert outsider.post(env_url(org, "production", "topics"), {"name": "x"}).status_code == 404
    assert (
        owner.get(env_url(org, "production", "topics", group.topic, "groups", "nobody")).status_code
        == 404
    )


def env_ids(org: NewOrganisation, one: str, other: str) -> tuple[str, str]:
    return org.project.environment(one).id, org.project.environment(other).id
