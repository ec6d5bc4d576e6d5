"""The dashboard in a real browser: Debian's Chromium, driven by Playwright, against a real
``queuecore serve`` process.

One user's first hour: sign up, create a key and copy it from the page, create a topic, publish
with the key over the REST API, watch depth and lag on the topic and group pages, dead-letter a
message, replay it from the DLQ page and see the queue's depth fall. Every wait is one of
Playwright's auto-waiting expectations, with generous timeouts for a busy machine. Apart, a Pro
owner reads an issued invoice and its printable form with JavaScript off, and another makes a
group fair and reads its fairness keys.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tenants.models import NewOrganisation
from tests.support.chromium import launched_chromium, patient_context
from tests.support.invoices import issue, seed_month
from tests.support.services import Services
from tests.support.tenancy import bearer, new_organisation

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

PASSWORD = "a-long-enough-password"
OWNER_PASSWORD = "correct-horse-battery"  # tests.support.tenancy.new_organisation's

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """Chromium, headless (skipped on a laptop without it, a failure in CI)."""
    with launched_chromium() as browser:
        yield browser


@pytest.fixture
def page(chromium: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies) and page, with generous timeouts."""
    context = patient_context(chromium)
    yield context.new_page()
    context.close()


class Rest:
    """The REST API with the key copied from the dashboard."""

    def __init__(self, base: str, key: str, topic: str) -> None:
        self.http = httpx.Client(
            base_url=f"{base}/v1/topics/{topic}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.http.request(method, path, json=body)
        assert response.status_code < 300, response.text
        return response.json() if response.content else None


def sign_up(page: Page, api: str, email: str) -> None:
    from playwright.sync_api import expect

    page.goto(api)  # the bare URL leads to the sign-in page
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.get_by_role("link", name="Create an account").click()
    page.get_by_label("Organisation name").fill("Browser Co")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    # Signed in at once, in the new organisation's development environment.
    expect(page.get_by_role("status")).to_contain_text("Your organisation is ready")
    expect(page.locator("a.env-development")).to_have_attribute("aria-current", "page")


def create_key(page: Page) -> str:
    from playwright.sync_api import expect

    page.locator("ul.sections").get_by_role("link", name="API keys").click()
    expect(page.get_by_role("heading", name="Create a key")).to_be_visible()
    page.get_by_label("Name").fill("browser-test")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_test_id("new-key-secret")
    expect(secret).to_have_text(re.compile(r"^pq_test_sk_[0-9A-Za-z]{32}$"))
    return secret.inner_text()


def create_topic(page: Page, topic: str) -> None:
    from playwright.sync_api import expect

    page.locator("ul.sections").get_by_role("link", name="Topics").click()
    page.get_by_label("Name").fill(topic)
    page.get_by_label("Partitions").fill("1")
    page.get_by_role("button", name="Create topic").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(topic)
    expect(page.get_by_test_id("topic-depth")).to_have_text("0")


def test_sign_up_key_topic_publish_lag_dead_letter_and_replay_in_a_browser(
    api: str, page: Page
) -> None:
    from playwright.sync_api import expect

    topic, email = "orders.browser", f"browser-{secrets.token_hex(5)}@example.com"
    sign_up(page, api, email)
    key = create_key(page)
    # shown once: the same page, opened again, has the key's hint and not its secret
    page.locator("ul.sections").get_by_role("link", name="API keys").click()
    expect(page.get_by_test_id("new-key-secret")).to_have_count(0)
    expect(page.get_by_text(f"…{key[-4:]}", exact=True)).to_be_visible()
    create_topic(page, topic)

    rest = Rest(api, key, topic)
    rest.call("PUT", "/groups/billing", {"startFrom": "earliest", "deadLetter": {"maxRetries": 0}})
    for n in range(3):
        rest.call("POST", "/messages", {"data": {"order": n}})
    member = rest.call("POST", "/groups/billing/members", {"clientId": "browser"})["memberId"]
    pulled = rest.call("POST", f"/groups/billing/members/{member}/pull", {"maxMessages": 3})
    first, second, _ = pulled["messages"]

    page.reload()
    expect(page.get_by_test_id("topic-depth")).to_have_text("3")
    expect(page.get_by_test_id("group-lag-billing")).to_have_text("3")
    page.get_by_role("link", name="billing", exact=True).click()
    expect(page.get_by_role("heading", name="Consumer group billing")).to_be_visible()
    expect(page.get_by_test_id("group-lag")).to_have_text("3")
    expect(page.get_by_role("cell", name=member)).to_have_count(2)  # member list and owner

    rest.call("POST", "/groups/billing/ack", {"ackIds": [first["ackId"]]})
    nacked = rest.call("POST", "/groups/billing/nack", {"ackId": second["ackId"], "error": "boom"})
    assert nacked["deadLettered"] is True
    page.reload()
    expect(page.get_by_test_id("group-lag")).to_have_text("1")
    expect(page.get_by_test_id("dlq-depth")).to_have_text("1")

    page.get_by_test_id("dlq-depth").click()
    expect(page.get_by_role("heading", name="Dead-letter queue of billing")).to_be_visible()
    expect(page.get_by_test_id("dlq-depth")).to_have_text("1")
    expect(page.get_by_role("cell", name="boom")).to_be_visible()
    page.get_by_role("button", name=f"Replay message {second['messageId']}").click()
    expect(page.get_by_role("status")).to_contain_text("Replayed 1 dead-lettered message")
    expect(page.get_by_test_id("dlq-depth")).to_have_text("0")
    expect(page.get_by_text("The queue is empty.")).to_be_visible()

    again = rest.call("POST", f"/groups/billing/members/{member}/pull", {"waitMs": 10_000})
    assert [(m["messageId"], m["attempt"]) for m in again["messages"]] == [(second["messageId"], 1)]

    page.locator("form[action$='/logout'] button").click()
    expect(page.get_by_role("status")).to_have_text("You are signed out.")


@pytest.fixture
def page_without_javascript(chromium: Browser) -> Iterator[Page]:
    """Like ``page``, with JavaScript turned off: every console page is plain links and forms."""
    context = patient_context(chromium, java_script_enabled=False)
    yield context.new_page()
    context.close()


def reload_until(page: Page, test_id: str, text: str, timeout_s: float = 60) -> None:
    """Reload until an element shows ``text`` (traffic counts reach the page within seconds)."""
    deadline = time.monotonic() + timeout_s
    while page.get_by_test_id(test_id).inner_text() != text:
        assert time.monotonic() < deadline, f"{test_id} never showed {text}"
        time.sleep(1)
        page.reload()


def test_console_rates_message_browser_and_test_message_with_javascript_off(
    api: str, page_without_javascript: Page
) -> None:
    from playwright.sync_api import expect

    page = page_without_javascript
    topic, email = "console.browser", f"console-{secrets.token_hex(5)}@example.com"
    sign_up(page, api, email)
    key = create_key(page)
    create_topic(page, topic)
    rest = Rest(api, key, topic)
    rest.call("PUT", "/groups/billing", {"startFrom": "earliest"})
    early = [rest.call("POST", "/messages", {"data": {"order": n}}) for n in range(25)]
    time.sleep(1.2)
    between = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    time.sleep(1.2)
    member = rest.call("POST", "/groups/billing/members", {"clientId": "console"})["memberId"]
    pulled = rest.call("POST", f"/groups/billing/members/{member}/pull", {"maxMessages": 10})
    assert len(pulled["messages"]) == 10

    # a test message from the topic page, shown where it was stored
    page.reload()
    page.get_by_label("Data").fill('{"hello": "browser"}')
    page.get_by_label("Key (optional)").fill("user-1")
    page.get_by_label("Headers (optional)").fill("source=console\ntrace=abc")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("status")).to_contain_text("stored at offset 25 of this partition")
    row = page.locator('tr[data-offset="25"]')
    expect(row).to_contain_text('{"hello":"browser"}')
    expect(row).to_contain_text("user-1")
    expect(row).to_contain_text("source=console")

    # by offset, page by page, with links
    page.get_by_role("link", name="Earliest").click()
    expect(page.locator("tr[data-offset]")).to_have_count(20)
    expect(page.locator("tr[data-offset]").first).to_contain_text('{"order":0}')
    page.get_by_role("link", name="Next page").click()
    expect(page.locator("tr[data-offset]")).to_have_count(6)
    expect(page.locator("tr[data-offset]").first).to_contain_text('{"order":20}')
    page.get_by_role("link", name="Previous page").click()
    expect(page.locator("tr[data-offset]")).to_have_count(20)
    page.get_by_label("From offset").fill("24")
    page.get_by_role("button", name="Show").first.click()
    expect(page.locator("tr[data-offset]")).to_have_count(2)

    # by time: the test message is the only one published after the pause
    page.get_by_label("From time (UTC)").fill(between)
    page.get_by_role("button", name="Show").last.click()
    expect(page.get_by_test_id("seek-result")).to_contain_text("is at offset 25")
    expect(page.locator("tr[data-offset]")).to_have_count(1)
    assert early[-1]["offset"] == 24

    # traffic: 26 published (25 over the API, one from the form), 10 consumed
    page.get_by_role("link", name=topic).click()
    reload_until(page, "traffic-published", "26")
    expect(page.get_by_test_id("traffic-consumed")).to_have_text("10")
    page.get_by_text("Traffic as a table").click()
    expect(page.get_by_test_id("traffic-table")).to_be_visible()
    page.get_by_role("link", name="last day").click()
    expect(page.get_by_test_id("traffic-published")).to_have_text("26")


def invoiced_organisation(database_url: str) -> tuple[NewOrganisation, str]:
    """A Pro organisation with a month of seeded usage invoiced; the invoice's number."""
    org = new_organisation(database_url, tier="pro")
    seed_month(database_url, org)
    return org, issue(database_url, org).issued[0]


def test_an_invoice_in_a_browser_with_javascript_off(
    api: str, chromium: Browser, services: Services
) -> None:
    from playwright.sync_api import expect

    # Playwright's sync API runs an event loop in this thread: the set-up runs in another one.
    with ThreadPoolExecutor(1) as pool:
        org, number = pool.submit(invoiced_organisation, services.database_url).result()
    context = patient_context(chromium, java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(f"{api}/dashboard/login")
        page.get_by_label("Email").fill(org.owner_email)
        page.get_by_label("Password").fill(OWNER_PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.locator("a.env-production").click()
        page.locator("ul.sections").get_by_role("link", name="Invoices").click()
        expect(page.get_by_role("heading", level=1)).to_contain_text("Invoices")
        page.get_by_role("link", name=number).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Invoice {number}")
        expect(page.get_by_test_id("invoice-total")).to_have_text("28.22 USD")
        expect(page.get_by_test_id("invoice-lines").locator("tbody tr")).to_have_count(3)
        page.get_by_role("link", name="Printable version").click()
        expect(page.get_by_test_id("invoice-total")).to_have_text("28.22 USD")
        expect(page.locator("nav.switcher")).to_have_count(0)
        page.emulate_media(media="print")
        expect(page.locator(".screen-only")).to_be_hidden()
    finally:
        context.close()


def test_an_owner_makes_a_group_fair_and_reads_its_keys(
    chromium: Browser, api: str, services: Services
) -> None:
    from playwright.sync_api import expect

    # Playwright's sync API runs an event loop in this thread: the set-up runs in another one.
    with ThreadPoolExecutor(1) as pool:
        org = pool.submit(new_organisation, services.database_url, "pro").result()
    rest = httpx.Client(base_url=f"{api}/v1", headers=bearer(org.keys["production"].secret))
    assert rest.post("/topics", json={"name": "mail.jobs", "partitions": 1}).status_code == 201
    assert rest.put("/topics/mail.jobs/groups/senders", json={"startFrom": "earliest"}).is_success
    messages = [{"data": n, "fairnessKey": "acme", "throttleKeys": ["emails"]} for n in range(4)]
    messages.append({"data": 9, "fairnessKey": "vip"})
    sent = rest.post("/topics/mail.jobs/messages/batch", json={"messages": messages})
    assert sent.status_code == 201

    context = patient_context(chromium)
    page = context.new_page()
    page.goto(f"{api}/dashboard/login")
    page.get_by_label("Email").fill(org.owner_email)
    page.get_by_label("Password").fill(OWNER_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.locator("a.env-production").click()
    page.locator("ul.sections").get_by_role("link", name="Configuration").click()
    page.get_by_role("textbox", name="Key").fill("throttle.emails.rate")
    page.get_by_role("textbox", name="Value").fill("5")
    page.get_by_role("button", name="Save key").click()
    expect(page.get_by_test_id("config-entries")).to_contain_text("throttle.emails.rate")

    page.locator("ul.sections").get_by_role("link", name="Topics").click()
    page.get_by_role("link", name="mail.jobs").click()
    page.get_by_role("link", name="senders").click()
    expect(page.get_by_test_id("fair-state")).to_have_text("no: offset order")
    page.get_by_label("Deliver fairly across fairness keys").check()
    page.get_by_label("Weights").fill("vip=3")
    page.get_by_role("button", name="Save fair scheduling").click()
    expect(page.get_by_role("status")).to_contain_text("fair scheduling was saved")
    expect(page.get_by_test_id("fair-state")).to_have_text("yes")
    keys = page.get_by_test_id("per-key").locator("tbody tr")
    expect(keys).to_have_count(2)
    expect(keys.nth(0)).to_contain_text("acme")
    expect(keys.nth(1)).to_contain_text("vip")
    expect(keys.nth(1).locator("td").nth(3)).to_have_text("3")
    expect(page.get_by_test_id("per-throttle")).to_contain_text("emails")
    if shot := os.environ.get("QUEUECORE_SCREENSHOT_DIR"):
        page.screenshot(path=f"{shot}/fair-group.png", full_page=True)
    context.close()
