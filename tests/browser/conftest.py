"""Real headless Chromium, driven by Selenium, against pytest-django's live server.

Chromium and its driver come from Debian (``make browser`` installs them).
Where they are missing the browser tests are skipped on a workstation, and
fail under ``CI=true``: CI must not pass without having run them.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.admin_support import PASSWORD

CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = Path(settings.BASE_DIR) / ".screenshots"
WAIT_SECONDS = 15
WINDOW = (1440, 1000)


@pytest.fixture(scope="session")
def browser(live_server, django_db_setup):
    # Set up after the live server and the test database, so that the browser
    # quits (and its connections end) before the database is dropped.
    chromium = shutil.which("chromium")
    if chromium is None or not os.access(CHROMEDRIVER, os.X_OK):
        message = "chromium and chromium-driver are not installed (run `make browser`)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    profile = tempfile.mkdtemp(prefix="punctual-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        _wait_for_request_threads_to_end()


def _wait_for_request_threads_to_end(seconds: float = 10.0) -> None:
    """Chromium keeps HTTP connections alive, and the live server serves each
    on its own thread, which holds a database connection until the socket
    closes. Wait for them after the browser quits, so that the test database
    can be dropped."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not [t for t in threading.enumerate() if "process_request_thread" in t.name]:
            return
        time.sleep(0.05)  # polling, bounded by the deadline above


@pytest.fixture
def page(browser, live_server, settings):
    """The browser, signed out, at the live server, with quick password hashing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    browser.get(live_server.url + "/admin/login/")
    browser.delete_all_cookies()
    browser.set_window_size(*WINDOW)
    return Page(browser, live_server.url)


class Page:
    """A few verbs over the driver: open, log in, submit and wait, screenshot."""

    def __init__(self, driver, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url

    def wait(self, condition, seconds: float = WAIT_SECONDS):
        return WebDriverWait(self.driver, seconds).until(condition)

    def open(self, path: str) -> None:
        self.driver.get(self.base_url + path)
        self.wait(lambda d: d.execute_script("return document.readyState") == "complete")

    def find(self, css: str):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def has(self, css: str) -> bool:
        return bool(self.find_all(css))

    @property
    def text(self) -> str:
        return self.find("body").text

    def wait_gone(self, element) -> None:
        """Wait until ``element``'s page has been replaced. Selenium's
        ``staleness_of`` knows only the stale-element error; chromedriver 156
        may answer a query on an element of a page being replaced with an
        "unknown error: … does not belong to the document" instead, which
        means the same thing."""

        def gone(_driver) -> bool:
            try:
                element.is_enabled()
            except StaleElementReferenceException:
                return True
            except WebDriverException as exc:
                if "does not belong to the document" in str(exc):
                    return True
                raise
            return False

        self.wait(gone)

    def click_and_wait(self, element) -> None:
        """Click something that loads a new page, and wait until it has."""
        old = self.find("html")
        element.click()
        self.wait_gone(old)
        self.wait(lambda d: d.execute_script("return document.readyState") == "complete")

    def log_in(self, username: str) -> None:
        self.open("/admin/login/")
        self.find("#id_username").send_keys(username)
        self.find("#id_password").send_keys(PASSWORD)
        self.click_and_wait(self.find("input[type=submit]"))
        self.wait(EC.presence_of_element_located((By.ID, "user-tools")))

    def screenshot(self, name: str) -> Path:
        """The whole page, not just the window (Chrome DevTools' full-page capture),
        at least as wide as the window."""
        SCREENSHOTS.mkdir(exist_ok=True)
        size = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        window = self.driver.execute_script("return document.documentElement.clientWidth")
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {
                    "x": 0,
                    "y": 0,
                    "width": max(size["width"], window),
                    "height": size["height"],
                    "scale": 1,
                },
            },
        )
        path = SCREENSHOTS / f"{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
