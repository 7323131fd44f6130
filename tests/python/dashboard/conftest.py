"""A headless Debian Chromium driven by Playwright (browsers cannot be
downloaded here, so Playwright starts the system binary), and where the
browser tests put their screenshots: `OXRAY_SCREENSHOT_DIR` (`make
screenshots` points it at docs/screenshots), else the test's temp dir."""

import os
import shutil

import pytest

CHROMIUM = os.environ.get("OXRAY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        raise RuntimeError(
            f"no Chromium at {CHROMIUM}: install Debian's (apt-get install chromium; `make venv` does) "
            "or point OXRAY_CHROMIUM at one"
        )
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def screenshots(tmp_path):
    """Where to save a page's screenshot, by name."""
    root = os.environ.get("OXRAY_SCREENSHOT_DIR") or str(tmp_path)
    os.makedirs(root, exist_ok=True)
    return lambda name: os.path.join(root, f"{name}.png")


class ConsoleErrors:
    """Every console error and uncaught exception of a page."""

    def __init__(self, page):
        self.seen = []
        page.on("console", lambda msg: msg.type == "error" and self.seen.append(f"console: {msg.text}"))
        page.on("pageerror", lambda error: self.seen.append(f"page error: {error}"))


@pytest.fixture
def console_errors():
    return ConsoleErrors
