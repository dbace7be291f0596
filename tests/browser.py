"""Headless Chromium for the tests that hover and click in a page (Debian's ``chromium``,
driven by Playwright). Skipped where either is missing, except under
``LATENTLENS_REQUIRE_BROWSER=1`` (``.ci/run`` installs Chromium and sets it), where a
missing browser fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

REQUIRED = os.environ.get("LATENTLENS_REQUIRE_BROWSER") == "1"
# Without the background-networking flags Chromium keeps reaching for Google's hosts, which
# a closed network refuses; as root it needs --no-sandbox.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def _missing(message: str) -> None:
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's ``Browser``), one per test module."""
    executable = next(
        (shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None
    )
    if executable is None:
        _missing("no Chromium installed (Debian's chromium package): the browser test is skipped")
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415
    except ImportError:
        _missing("Playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh page that records the script errors it meets (``page.errors``)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    opened.errors = []
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    yield opened
    context.close()
