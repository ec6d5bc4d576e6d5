"""A console that manages: topics changed and deleted (with the name typed), groups configured,
charts a person can read, the message browser's layout, the dead-letter page's reasons."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from litestar.testing import TestClient

from control_plane.dashboard.charts import time_chart
from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import (
    Browser,
    add_member,
    env_url,
    redirect_target,
    text_of,
)
from tests.support.services import Services
from tests.support.tenancy import bearer
from tests.support.usage import insert_hourly


def topic_url(org: NewOrganisation, topic: str, *parts: str) -> str:
    return env_url(org, "development", "topics", topic, *parts)


def api(
    client: TestClient, org: NewOrganisation, method: str, path: str, body: object = None
) -> Any:
    key = org.keys["development"].secret
    answer = client.request(method, f"/v1{path}", json=body, headers=bearer(key))
    assert answer.status_code < 300, answer.text
    return answer.json()


def make_topic(owner: Browser, org: NewOrganisation, unique: Callable[[str], str]) -> str:
    name = unique("manage").replace("-", ".")
    made = owner.post(env_url(org, "development", "topics"), {"name": name, "partitions": "1"})
    assert redirect_target(made).endswith("notice=topic-created")
    return name


def test_a_topic_is_edited_from_its_page_and_partitions_only_grow(
    owner: Browser, org: NewOrganisation, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = make_topic(owner, org, unique)
    settings = {"partitions": "3", "retention": "1d", "latency_class": "standard"}

    saved = owner.post(topic_url(org, topic, "settings"), settings)
    shrunk = owner.post(topic_url(org, topic, "settings"), {**settings, "partitions": "2"})

    assert redirect_target(saved).endswith("notice=topic-updated")
    described = api(client, org, "GET", f"/topics/{topic}")
    assert (described["partitions"], described["retention"], described["latencyClass"]) == (
        3,
        "1d",
        "standard",
    )
    assert shrunk.status_code == 422 and "cannot" in text_of(shrunk).lower()
    assert 'id="settings-partitions"' in shrunk.text  # the form is back, with the reason
    too_long = owner.post(topic_url(org, topic, "settings"), {**settings, "retention": "900d"})
    assert too_long.status_code == 422 and "retention" in text_of(too_long)


def test_a_topic_is_deleted_only_once_its_name_is_typed(
    owner: Browser, org: NewOrganisation, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = make_topic(owner, org, unique)

    wrong = owner.post(topic_url(org, topic, "delete"), {"confirm": topic + "x"})
    assert wrong.status_code == 422 and f"Type the topic's name, {topic}" in text_of(wrong)
    assert api(client, org, "GET", f"/topics/{topic}")["name"] == topic

    deleted = owner.post(topic_url(org, topic, "delete"), {"confirm": topic})
    assert redirect_target(deleted).endswith("notice=topic-deleted")
    gone = client.get(f"/v1/topics/{topic}", headers=bearer(org.keys["development"].secret))
    assert gone.status_code == 404
    assert owner.get(topic_url(org, topic)).status_code == 404
    again = owner.post(env_url(org, "development", "topics"), {"name": topic, "partitions": "1"})
    assert redirect_target(again).endswith("notice=topic-created")  # the name is free at once


def test_a_viewer_can_neither_change_nor_delete_a_topic(
    org: NewOrganisation,
    owner: Browser,
    services: Services,
    browser: Callable[[], Browser],
    unique: Callable[[str], str],
) -> None:
    topic = make_topic(owner, org, unique)
    viewer = browser()
    assert viewer.login(add_member(services.database_url, org, "viewer").email).status_code == 303

    page = text_of(viewer.get(topic_url(org, topic)))
    changed = viewer.post(topic_url(org, topic, "settings"), {"partitions": "5"})
    deleted = viewer.post(topic_url(org, topic, "delete"), {"confirm": topic})

    assert "Topic settings" not in page and "Delete this topic" not in page
    assert changed.status_code == 403 and deleted.status_code == 403
    assert "Topic settings" in text_of(owner.get(topic_url(org, topic)))


def test_a_group_is_configured_from_its_page_with_the_apis_checks(
    owner: Browser, org: NewOrganisation, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = make_topic(owner, org, unique)
    api(client, org, "PUT", f"/topics/{topic}/groups/billing", {})
    form = {
        "start_from": "earliest",
        "ack_timeout": "5s",
        "max_in_flight": "7",
        "session_timeout": "20s",
        "max_retries": "2",
        "retry_delay": "1s",
        "alert_threshold": "3",
    }

    saved = owner.post(topic_url(org, topic, "groups", "billing", "settings"), form)
    bad = owner.post(
        topic_url(org, topic, "groups", "billing", "settings"), {**form, "ack_timeout": "5y"}
    )

    assert redirect_target(saved).endswith("notice=group-configured")
    config = api(client, org, "GET", f"/topics/{topic}/groups/billing")["config"]
    assert config == {
        "startFrom": "earliest",
        "ackTimeout": "5s",
        "maxInFlight": 7,
        "sessionTimeout": "20s",
        "deadLetter": {"maxRetries": 2, "retryDelay": "1s", "alertThreshold": 3},
        "push": None,
    }
    assert bad.status_code == 422 and "ackTimeout" in text_of(bad)
    assert 'value="5y"' in bad.text  # what was typed stays in the form
    page = text_of(owner.get(topic_url(org, topic, "groups", "billing")))
    assert 'value="7"' in page and "Group settings" in page


def test_a_dead_letter_says_why_and_links_the_settings_behind_it(
    owner: Browser, org: NewOrganisation, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = make_topic(owner, org, unique)
    group = f"/topics/{topic}/groups/slow"
    api(
        client,
        org,
        "PUT",
        group,
        {"startFrom": "earliest", "ackTimeout": "1s", "deadLetter": {"maxRetries": 0}},
    )
    api(client, org, "POST", f"/topics/{topic}/messages", {"data": {"n": 1}})
    api(client, org, "POST", f"/topics/{topic}/messages", {"data": {"n": 2}})
    member = api(client, org, "POST", f"{group}/members", {})["memberId"]
    pulled = api(client, org, "POST", f"{group}/members/{member}/pull", {"maxMessages": 2})
    api(
        client,
        org,
        "POST",
        f"{group}/nack",
        {"ackId": pulled["messages"][1]["ackId"], "error": "bad input"},
    )
    time.sleep(1.5)  # the first lease runs out
    api(client, org, "POST", f"{group}/members/{member}/pull", {"maxMessages": 1, "waitMs": 0})

    page = owner.get(topic_url(org, topic, "groups", "slow", "dlq"))
    text = text_of(page)

    assert "No ack in time" in text and "held past the group's ack timeout (1s)" in text
    assert "Nacked by the consumer" in text and "bad input" in text
    links = re.findall(r'href="([^"]+)" data-testid="reason-settings"', page.text)
    assert links and all(link.endswith("/groups/slow#settings") for link in links)
    assert 'id="settings"' in owner.get(links[0].split("#")[0]).text


def test_the_message_browser_shows_key_headers_and_long_data_one_member_a_line(
    owner: Browser, org: NewOrganisation, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = make_topic(owner, org, unique)
    data = {"order": 1234567890123, "lines": [{"sku": "A-1", "amount": 9900}] * 3}
    message = {"data": data, "key": "ord-1", "headers": {"source": "test"}}
    api(client, org, "POST", f"/topics/{topic}/messages", message)

    page = owner.get(topic_url(org, topic, "partitions", "0", "messages"))
    row = re.search(r'<tr data-offset="0">(.*?)</tr>', page.text, re.S)

    assert row
    assert re.search(r'data-testid="key"><code>ord-1</code>', row.group(1))
    assert "<li><code>source=test</code></li>" in row.group(1)
    shown = re.search(r'<pre class="data">(.*?)</pre>', row.group(1), re.S)
    assert shown and '\n  "order": 1234567890123,\n' in text_of_html(shown.group(1))
    assert json.loads(text_of_html(shown.group(1))) == data


def text_of_html(fragment: str) -> str:
    return html.unescape(fragment)


def test_charts_span_the_page_with_dated_ticks_gridlines_and_values_on_hover() -> None:
    until = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
    points = [(until - timedelta(minutes=m), float(m % 7)) for m in range(60, -1, -5)]

    chart = time_chart(
        "rates", until - timedelta(hours=1), until, [("published", "published", points)], str
    )

    assert chart is not None and chart.width >= 900
    assert chart.x_ticks[0].label == "14 Mar 11:00"
    assert chart.x_ticks[-1].label == "14 Mar 12:00"
    assert [t.label for t in chart.y_ticks] == ["0", "2", "4", "6"]  # round steps, gridlines
    assert chart.lines[0].dots[-1].label == "2025-03-14 12:00 UTC: 0.0 published"
    assert time_chart("empty", until, until, [("x", "x", [])], str) is None


def test_usage_has_a_chart_by_day(owner: Browser, org: NewOrganisation, services: Services) -> None:
    production = org.project.environment("production").id
    today = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    insert_hourly(services.database_url, production, today, messages_in=120, messages_out=80)

    page = owner.get(env_url(org, "production", "usage"))

    assert page.status_code == 200
    figure = re.search(
        r'<figure class="chart" data-testid="usage-chart">(.*?)</figure>', page.text, re.S
    )
    assert figure, "no usage chart"
    assert 'class="grid"' in figure.group(1)
    assert f"{today:%Y-%m-%d} 00:00 UTC: 120 in" in figure.group(1)
    assert re.search(r"<text[^>]*x-tick[^>]*>\d\d \w{3}</text>", figure.group(1))
