"""The demo report as a user sees it: opened from disk in headless Chromium, with no console error,
every plot loaded, and a screenshot kept for a person to look at.

Why a browser and not only the HTML text: a wrong image path, a blocked resource or a broken page
shows in a browser's console and in ``naturalWidth``, not in a string search of the file. No broker or
Spark is needed; this sits with the end-to-end tests because it checks what ``make demo`` hands over.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.demo.html_report import write_report
from services.demo.plots import PLOTS
from tests.support.chromium import console_errors, headless_chromium, missing_browser
from tests.support.demo_summaries import both_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IMAGES_JS = (  # each <img>: its src, and whether it loaded
    "return Array.from(document.images, i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0]);"
)


@pytest.fixture(scope="module")
def browser():
    reason = missing_browser()
    if reason:
        pytest.skip(f"browser test skipped: {reason}")
    with headless_chromium() as driver:
        yield driver


def test_the_report_opens_offline_with_every_plot_and_no_console_error(browser, tmp_path: Path):
    index = write_report(both_runs(), tmp_path / "demo-report")
    browser.get(index.as_uri())  # returns after the load event: images included

    assert browser.title == "Ballast demo: FAIL"
    assert console_errors(browser) == []
    loaded = dict(browser.execute_script(IMAGES_JS))
    assert loaded == {p.file: True for p in PLOTS}

    shot = tmp_path / "report-screenshot.png"
    assert browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_a_missing_plot_is_caught(browser, tmp_path: Path):
    """The checks above can fail: a page whose image is gone shows a console error and an unloaded image."""
    index = write_report(both_runs(), tmp_path / "demo-report")
    (index.parent / PLOTS[0].file).unlink()
    browser.get(index.as_uri())

    assert console_errors(browser), "a missing image left no console error"
    loaded = dict(browser.execute_script(IMAGES_JS))
    assert loaded[PLOTS[0].file] is False
    assert all(loaded[p.file] for p in PLOTS[1:])
