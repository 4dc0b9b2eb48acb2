"""The HTML report as a person sees it: rendered by a real headless Chromium.

Uses Debian's chromium (``.ci/run`` installs it); Playwright only drives it and
downloads nothing. Without a browser the test skips, unless KC_REQUIRE_BROWSER=1
(set by CI) makes that a failure."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.browser import CHROMIUM, OFFLINE_FLAGS
from tests.suite_command import warm_suite

FLAGS = list(OFFLINE_FLAGS)


@pytest.fixture(scope="module")
def quirk_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reports = tmp_path_factory.mktemp("browser")
    cmd = [
        *warm_suite(),
        "--sim-quirk",
        "search_fourth_hint",
        "--requirement",
        "SRCH-003",
        "--requirement",
        "CAP-001",
        "--reports",
        str(reports),
    ]
    subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    return reports / "report.html"


def test_html_report_renders_verdict_failure_and_filter(quirk_report: Path, tmp_path: Path) -> None:
    if CHROMIUM is None:
        if os.environ.get("KC_REQUIRE_BROWSER") == "1":
            pytest.fail("KC_REQUIRE_BROWSER=1 but no chromium is installed")
        pytest.skip("no chromium on this machine (CI installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=FLAGS
        )  # Playwright gives it a fresh profile
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(quirk_report.as_uri())
            verdict = page.locator("#verdict")
            assert verdict.is_visible() and "NON-CONFORMANT" in verdict.inner_text()
            failure = page.locator("#fail-SRCH-003")
            assert failure.is_visible()
            assert "Search returns at most three title/summary/ref hints" in failure.inner_text()
            assert "curl -sS -X POST" in failure.inner_text()
            passing_row = page.locator("tr.s-row-verified").first
            failing_row = page.locator("tr.s-row-failed").first
            assert passing_row.is_visible() and failing_row.is_visible()
            page.locator("#only-failures").check()
            assert not passing_row.is_visible() and failing_row.is_visible()
            page.locator("#only-failures").uncheck()
            unverified_row = page.locator("tr.s-row-not_verified").first
            page.locator("#only-unverified").check()
            assert unverified_row.is_visible() and not passing_row.is_visible() and not failing_row.is_visible()
            page.locator("#only-unverified").uncheck()
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 20_000, "the screenshot looks blank"
        finally:
            browser.close()


def test_html_report_is_self_contained(quirk_report: Path) -> None:
    """No stylesheet, script, image or font is fetched: the file opens offline."""
    html = quirk_report.read_text("utf-8")
    assert not re.search(r"<(link|script|img|iframe)\b[^>]*\b(href|src)\s*=", html, re.IGNORECASE)
    assert "@import" not in html and "url(" not in html
