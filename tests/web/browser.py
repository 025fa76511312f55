"""Debian's Chromium driven by Playwright for the UI's browser tests, launched as the test setup installs
it (``make test`` installs it when missing), with a fresh profile each time; skipped, saying why, only
when there is no Chromium at all.

``HERDER_UI_SCREENSHOTS=DIR`` makes the tests save screenshots of the main pages into DIR (how
``docs/ui/*.png`` are made: ``HERDER_UI_SCREENSHOTS=docs/ui pytest tests/web``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = os.environ.get("HERDER_UI_SCREENSHOTS", "")
MAX_SHOT_HEIGHT = 1700

if not CHROMIUM.exists():
    pytest.skip(
        f"{CHROMIUM} is missing: `make test` installs Debian's chromium for the browser tests",
        allow_module_level=True,
    )


@contextmanager
def chromium() -> Iterator[BrowserContext]:
    """A browser with a fresh profile that accepts the test server's own CA's certificate."""
    with tempfile.TemporaryDirectory(prefix="herder-chromium-") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            args=ARGS,
            headless=True,
            ignore_https_errors=True,
            viewport={"width": 1280, "height": 860},
        )
        context.set_default_timeout(20_000)
        for page in context.pages:
            _reloading_on_network_change(page)
        context.on("page", _reloading_on_network_change)
        try:
            yield context
        finally:
            context.close()


def _reloading_on_network_change(page: Page) -> None:
    """Chromium gives up a page load in flight when the host's interfaces change (ERR_NETWORK_CHANGED), and
    other tests make and remove network namespaces and veth pairs all the time: the page's ``goto`` and
    ``reload`` load again then, as a person would."""
    page.goto = _again(page.goto)  # type: ignore[method-assign]
    page.reload = _again(page.reload)  # type: ignore[method-assign]


def _again(load: Callable[..., Any]) -> Callable[..., Any]:
    def again(*args: Any, **options: Any) -> Any:
        for _ in range(2):
            try:
                return load(*args, **options)
            except PlaywrightError as exc:
                if "ERR_NETWORK_CHANGED" not in str(exc):
                    raise
        return load(*args, **options)

    return again


def sign_in(page: Page, base: str, token: str) -> None:
    page.goto(f"{base}/ui/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r".*/ui/clusters$"))


def sign_out(page: Page) -> None:
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r".*/ui/login$"))


def screenshot(page: Page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        # The whole page, but no taller than a long laptop screen (the audit log goes on and on).
        height = min(int(page.evaluate("document.documentElement.scrollHeight")), MAX_SHOT_HEIGHT)
        clip = {
            "x": 0,
            "y": 0,
            "width": page.viewport_size["width"] if page.viewport_size else 1280,
            "height": height,
        }
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True, clip=clip)
