"""What every dashboard page shares: the environment switcher, security headers, the stylesheet,
HTML error pages, and no dashboard route in the API's OpenAPI schema."""

from __future__ import annotations

import re

from litestar.testing import TestClient

from tenants.models import NewOrganisation
from tests.control_plane.dashboard.pages import Browser, env_url


def test_the_switcher_links_the_projects_three_environments_keeping_the_section(
    owner: Browser, org: NewOrganisation
) -> None:
    page = owner.get(env_url(org, "staging", "keys"))
    assert page.status_code == 200
    tabs = re.findall(r'<a href="(/dashboard/envs/[^"]+)" class="env-(\w+)"([^>]*)>', page.text)
    assert [(href, name) for href, name, _ in tabs] == [
        (env_url(org, name, "keys"), name) for name in ("development", "staging", "production")
    ]
    assert [name for _, name, extra in tabs if 'aria-current="page"' in extra] == ["staging"]
    for section in ("topics", "keys", "alerts"):
        assert f'href="{env_url(org, "staging", section)}"' in page.text
    # an environment's own URL opens on its topics
    bare = owner.get(env_url(org, "production"))
    assert bare.status_code == 303 and bare.headers["location"] == env_url(
        org, "production", "topics"
    )


def test_pages_forbid_framing_and_foreign_resources_and_the_stylesheet_is_served(
    owner: Browser, org: NewOrganisation
) -> None:
    page = owner.get(env_url(org, "development", "topics"))
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["content-type"].startswith("text/html")
    assert '<html lang="en">' in page.text and 'href="#main"' in page.text
    stylesheet = re.search(r'<link rel="stylesheet" href="([^"]+)">', page.text)
    assert stylesheet
    css = owner.get(stylesheet.group(1))
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert ".topbar" in css.text
    assert not re.findall(r'(?:src|href|action)="(?:[a-z]+:)?//', page.text)  # nothing foreign


def test_errors_are_html_pages_never_json_or_a_500(owner: Browser, org: NewOrganisation) -> None:
    unknown_env = owner.get("/dashboard/envs/env_doesnotexist/topics")
    assert unknown_env.status_code == 404
    assert unknown_env.headers["content-type"].startswith("text/html")
    assert "<h1>Not found</h1>" in unknown_env.text
    assert "frame-ancestors 'none'" in unknown_env.headers["content-security-policy"]
    assert re.search(r"request req_\w+", unknown_env.text)

    group = env_url(org, "development", "topics", "nope", "groups", "g")
    assert owner.get(group).status_code == 404
    no_queue = owner.get(env_url(org, "development", "topics", "nope", "groups", "g", "dlq"))
    assert no_queue.status_code == 404 and "text/html" in no_queue.headers["content-type"]


def test_the_openapi_schema_leaves_the_dashboard_out(client: TestClient) -> None:
    paths = client.get("/schema/openapi.json").json()["paths"]
    assert paths and not [path for path in paths if path.startswith("/dashboard") or path == "/"]
