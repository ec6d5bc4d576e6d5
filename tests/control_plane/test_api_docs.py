"""``/schema``: the interactive API docs render in a real browser with every request to another
host refused (the assets ship in the package), and no page of QueueCore can be framed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from litestar.testing import TestClient

from control_plane.apidocs import VENDOR
from tests.support.chromium import block_outside_requests, launched_chromium, patient_context

if TYPE_CHECKING:
    from playwright.sync_api import Browser

FRAMED_PATHS = [
    "/schema",
    "/schema/swagger",
    "/schema/openapi.json",
    "/schema/assets/swagger-ui-bundle.js",
    "/dashboard/login",
    "/healthz",
    "/v1/topics",  # a 401 error body
    "/no/such/page",
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """Chromium for this module."""
    with launched_chromium() as browser:
        yield browser


@pytest.mark.e2e
@pytest.mark.parametrize("path", ["/schema", "/schema/swagger"])
def test_the_api_docs_render_every_operation_with_outside_requests_blocked(
    api: str, chromium: Browser, path: str
) -> None:
    from playwright.sync_api import expect

    context = patient_context(chromium)
    refused = block_outside_requests(context)
    try:
        page = context.new_page()
        page.goto(f"{api}{path}")

        expect(page.get_by_role("heading", name="QueueCore API")).to_be_visible()
        publish = page.locator(".opblock").filter(has_text="Publish a message")
        expect(publish.first).to_be_visible()
        assert page.locator(".opblock").count() > 30  # every operation, not an error box
        expect(page.locator(".errors-wrapper")).to_have_count(0)
        publish.first.locator(".opblock-summary").click()  # the operation opens: UI is live
        expect(publish.first.locator(".opblock-body")).to_be_visible()
    finally:
        context.close()
    assert refused == []


@pytest.mark.e2e
def test_another_page_cannot_frame_the_api_docs(api: str, chromium: Browser) -> None:
    context = patient_context(chromium)
    try:
        page = context.new_page()
        # set_content waits for the page's load event, which waits for the frame's.
        page.set_content(f'<iframe id="docs" src="{api}/schema" width="800" height="600"></iframe>')
        framed = page.frame_locator("#docs")

        assert framed.locator("[data-spec-url]").count() == 0  # the docs page never loaded
        assert len(page.frames) == 2  # the frame exists, empty
    finally:
        context.close()


@pytest.mark.parametrize("path", FRAMED_PATHS)
def test_every_response_forbids_framing(client: TestClient, path: str) -> None:
    response = client.get(path)

    assert response.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


def test_the_docs_page_allows_scripts_from_this_origin_only(client: TestClient) -> None:
    response = client.get("/schema")
    policy = response.headers["content-security-policy"]

    assert response.status_code == 200
    assert "script-src 'self';" in policy and "https:" not in policy
    assert "//" not in response.text.replace("<!doctype", "")  # no absolute URL in the page


def test_the_vendored_assets_are_the_pinned_ones() -> None:
    import hashlib

    pinned = {
        line.split()[2]: line.split()[1]
        for line in (VENDOR / "VERSION").read_text().splitlines()
        if line.startswith("sha256 ")
    }

    assert set(pinned) == {"swagger-ui-bundle.js", "swagger-ui.css"}
    for name, digest in pinned.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest
