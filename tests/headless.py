"""Headless Chromium through chromedriver (Debian's `chromium` and `chromium-driver`), for tests
and for `docs/screenshots.py`. Each browser gets a fresh profile and reaches no network service."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def chromium_paths() -> tuple[str, str] | None:
    """(browser, driver) when both are installed, else None."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def headless_chromium(width: int = 1280, height: int = 900) -> Iterator[object]:
    """A selenium WebDriver on a fresh headless Chromium; quit and its profile removed on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = chromium_paths()
    if paths is None:
        raise RuntimeError(
            "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        )
    browser, driver_path = paths
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
