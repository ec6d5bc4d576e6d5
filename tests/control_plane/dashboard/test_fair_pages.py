"""The console's fair scheduling: a group's fairness and per-key stats, its onFailure hook, a
topic's onEnqueue hook, and the environment's runtime configuration."""

from __future__ import annotations

import re
from collections.abc import Callable

from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import (
    Browser,
    add_member,
    env_url,
    redirect_target,
    text_of,
)
from tests.control_plane.dashboard.test_console_manage import api, make_topic, topic_url
from tests.support.services import Services


def test_a_group_is_made_fair_and_its_keys_and_throttles_are_shown(
    owner: Browser, org: NewOrganisation, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = make_topic(owner, org, unique)
    api(client, org, "PUT", f"/topics/{topic}/groups/senders", {"startFrom": "earliest"})
    api(client, org, "PUT", "/config/throttle.emails.rate", {"value": "7"})
    messages = [{"data": i, "fairnessKey": "acme"} for i in range(5)] + [
        {"data": 9, "fairnessKey": "vip", "throttleKeys": ["emails"]}
    ]
    api(client, org, "POST", f"/topics/{topic}/messages/batch", {"messages": messages})
    form = {
        "fair": "on",
        "weights": "vip=3\n",
        "default_weight": "1",
        "quantum": "2",
        "on_failure": "",
    }

    saved = owner.post(topic_url(org, topic, "groups", "senders", "fairness"), form)

    assert redirect_target(saved).endswith("notice=fairness-saved")
    config = api(client, org, "GET", f"/topics/{topic}/groups/senders")["config"]
    assert config["fairness"] == {"weights": {"vip": 3}, "defaultWeight": 1, "quantum": 2}
    assert config["deadLetter"]["maxRetries"] == 5, "the other settings are kept"
    page = owner.get(topic_url(org, topic, "groups", "senders"))
    words = " ".join(re.sub(r"<[^>]+>", " ", text_of(page)).split())
    assert "Fair scheduling" in words and 'data-testid="per-key"' in page.text
    assert "acme 5 0 1" in words and "vip 1 0 3" in words, "key, pending, deficit, weight"
    assert "emails 7.0 7.0 7.0" in words, "throttle key, tokens, rate, burst"


def test_a_bad_hook_is_explained_on_the_page_and_fairness_turns_off(
    owner: Browser, org: NewOrganisation, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = make_topic(owner, org, unique)
    api(client, org, "PUT", f"/topics/{topic}/groups/g", {"startFrom": "earliest", "fairness": {}})
    url = topic_url(org, topic, "groups", "g", "fairness")

    refused = owner.post(url, {"fair": "on", "on_failure": "function on_failure(msg) return ("})
    off = owner.post(url, {"weights": "", "on_failure": ""})

    assert refused.status_code == 422 and "does not compile" in text_of(refused)
    assert redirect_target(off).endswith("notice=fairness-saved")
    assert "fairness" not in api(client, org, "GET", f"/topics/{topic}/groups/g")["config"]
    bad_weight = owner.post(url, {"fair": "on", "weights": "vip=zero"})
    assert bad_weight.status_code == 422 and "key=weight" in text_of(bad_weight)


def test_the_topic_hook_is_edited_from_the_topic_page(
    owner: Browser, org: NewOrganisation, client: TestClient, unique: Callable[[str], str]
) -> None:
    topic = make_topic(owner, org, unique)
    source = "function on_enqueue(msg) return {fairness_key = msg.key} end"

    saved = owner.post(topic_url(org, topic, "hook"), {"on_enqueue": source})
    broken = owner.post(topic_url(org, topic, "hook"), {"on_enqueue": "os.execute('x')"})

    assert redirect_target(saved).endswith("notice=hook-saved")
    assert api(client, org, "GET", f"/topics/{topic}")["onEnqueue"] == source
    assert broken.status_code == 422 and "INVALID_HOOK" not in broken.text
    assert "failed when run" in text_of(broken)
    assert source in owner.get(topic_url(org, topic)).text.replace("&#34;", '"')


def test_runtime_configuration_is_listed_set_and_deleted_by_those_who_manage_topics(
    owner: Browser,
    org: NewOrganisation,
    client: TestClient,
    services: Services,
    browser: Callable[[], Browser],
) -> None:
    url = env_url(org, "development", "config")
    saved = owner.post(url + "/", {"key": "throttle.api.rate", "value": "12"})
    refused = owner.post(url + "/", {"key": "throttle.api.burst", "value": "lots"})

    assert redirect_target(saved).endswith("notice=config-saved")
    assert api(client, org, "GET", "/config/throttle.api.rate")["value"] == "12"
    assert refused.status_code == 422 and "number" in text_of(refused)
    assert "throttle.api.rate" in text_of(owner.get(url))
    viewer = browser()
    member = add_member(services.database_url, org, "viewer")
    viewer.login(member.email)
    assert "throttle.api.rate" in text_of(viewer.get(url))
    assert viewer.post(url + "/", {"key": "x", "value": "1"}).status_code == 403
    deleted = owner.post(url + "/delete", {"key": "throttle.api.rate"})
    assert redirect_target(deleted).endswith("notice=config-deleted")
    assert "throttle.api.rate" not in text_of(owner.get(url))
