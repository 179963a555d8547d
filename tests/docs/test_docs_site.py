"""The manual: README as a short front door, the MkDocs site built strict, its pages opened in a
browser without console errors, and its runnable command blocks run."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from docs_site import REPO, build_site, served
from headless import chromium_paths, headless_chromium

README = REPO / "README.md"
DOCS = REPO / "docs"
RUNNABLE = re.compile(r"<!-- runnable -->\n```bash\n(.*?)```", re.S)
QUICKSTART = (
    "pip install torch==2.13.0 && pip install -e . && python -m service.train",
    'pip install torch==2.13.0 && pip install -c constraints.txt -e ".[dev]" && python -m pytest',
)


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = build_site(site)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return site


def test_readme_is_a_short_front_door_with_the_quickstart_contract():
    text = README.read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert [b.strip() for b in blocks] == list(QUICKSTART)  # exactly two commands, unchanged
    assert "docs/" in text and "mkdocs" in text


def test_the_site_builds_strict_with_every_page_in_its_navigation(built_site):
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")}
    built = {p.parent.relative_to(built_site).as_posix() for p in built_site.rglob("index.html")}
    assert {"." if p == "index" else p for p in pages} <= built
    assert (built_site / "reference" / "config" / "index.html").is_file()


@pytest.mark.skipif(
    chromium_paths() is None, reason="needs chromium and chromium-driver (.ci/run installs them)"
)
def test_every_page_opens_in_headless_chromium_without_console_errors(built_site):
    pages = sorted(p.parent.relative_to(built_site).as_posix() for p in built_site.rglob("index.html"))
    pages = [p for p in pages if not p.startswith(("assets", "search"))]
    assert len(pages) >= 15
    with served(built_site) as base, headless_chromium() as browser:
        for page in pages:
            browser.get(base + ("" if page == "." else page + "/"))
            assert browser.find_element("css selector", "article h1").text.strip(), page
            errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert not errors, f"{page}: {errors}"


def runnable_blocks() -> list[tuple[str, str]]:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        for block in RUNNABLE.findall(path.read_text()):
            found.append((path.relative_to(DOCS).as_posix(), block))
    return found


def test_the_getting_started_page_has_runnable_blocks():
    assert [page for page, _ in runnable_blocks()].count("getting-started.md") >= 2


@pytest.mark.e2e
@pytest.mark.parametrize(("page", "block"), runnable_blocks(), ids=lambda v: v if v.endswith(".md") else "")
def test_a_runnable_block_of_the_docs_runs(page, block, tmp_path):
    """Each block marked `<!-- runnable -->` runs as written, in a fresh directory, under bash -e."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, f"{page}:\n{block}\n" + (result.stdout + result.stderr)[-4000:]
