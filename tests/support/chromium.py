"""Headless Chromium for tests that must see a page the way a user's browser does.

Why the system's packages and explicit paths: given no driver path, Selenium Manager downloads a
browser and a driver from the internet; CI reaches package registries only. Debian's ``chromium``
and ``chromium-driver`` come as a matched pair, and a test that finds them missing skips, saying
how to install them, instead of failing on a machine without a browser.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = "apt-get install chromium chromium-driver"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")


def chromium_binary() -> str | None:
    return next((p for p in CHROMIUM if Path(p).is_file()), None)


def missing_browser() -> str | None:
    """Why a browser test cannot run here (the skip reason), or None when it can."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed: pip install -r requirements-dev.txt (make setup does)"
    if chromium_binary() is None:
        return f"no Chromium at {' or '.join(CHROMIUM)}: install it with `{INSTALL}`"
    if not Path(CHROMEDRIVER).is_file():
        return f"no ChromeDriver at {CHROMEDRIVER}: install it with `{INSTALL}`"
    return None


@contextmanager
def headless_chromium(width: int = 1280, height: int = 2400) -> Iterator[Any]:
    """A Selenium Chrome driver on the system's Chromium that records the console, quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium_binary() or CHROMIUM[0]
    for flag in (*FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for get_log("browser")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The page's console entries at SEVERE level (errors, failed loads) since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
