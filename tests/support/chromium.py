"""Debian's Chromium driven by Playwright, for the real-browser tests (Playwright's own browser
download is never used): launching it, and pages that may not reach past this machine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tests.support.services import unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Route

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-gpu",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 30_000
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@contextmanager
def launched_chromium() -> Iterator[Browser]:
    """Chromium, headless (skipped on a laptop without it, a failure in CI)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (make install)")
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=120_000
        )
        try:
            yield browser
        finally:
            browser.close()


def patient_context(browser: Browser, **options: object) -> BrowserContext:
    """A fresh context (no cookies) with generous timeouts for a busy machine."""
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = browser.new_context(**options)  # type: ignore[arg-type]
    context.set_default_timeout(TIMEOUT_MS)
    context.set_default_navigation_timeout(2 * TIMEOUT_MS)
    return context


def block_outside_requests(context: BrowserContext) -> list[str]:
    """Abort every request of the context to a host other than this machine; the returned list
    fills with the URLs that were refused."""
    refused: list[str] = []

    def route(route: Route) -> None:
        url = route.request.url
        scheme, host = urlsplit(url).scheme, urlsplit(url).hostname or ""
        if scheme in {"http", "https", "ws", "wss"} and host not in LOCAL_HOSTS:
            refused.append(url)
            route.abort("blockedbyclient")
        else:
            route.continue_()

    context.route("**/*", route)
    return refused
