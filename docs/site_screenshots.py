"""Screenshots of the documentation site: its home page and the configuration reference.

    python docs/site_screenshots.py [--out docs]

Builds the site (`mkdocs build --strict`) into a temporary directory, serves it on localhost and
photographs two pages in headless Chromium: docs/site_home.png and docs/site_config_reference.png.
Needs chromium and chromium-driver, and the dev extra (mkdocs, selenium).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the headless Chromium helper the tests use
sys.path.insert(0, str(REPO / "tests" / "docs"))  # and their site builder and server

from docs_site import build_site, served  # noqa: E402
from headless import headless_chromium  # noqa: E402

PAGES = {"site_home.png": "", "site_config_reference.png": "reference/config/"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="site-") as tmp:
        result = build_site(Path(tmp))
        if result.returncode != 0:
            print(result.stdout + result.stderr, file=sys.stderr)
            return 1
        with served(Path(tmp)) as base, headless_chromium(1280, 900) as browser:
            for name, page in PAGES.items():
                browser.get(base + page)
                browser.save_screenshot(str(args.out / name))
                print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
