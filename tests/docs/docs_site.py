"""The documentation site for tests and screenshots: built with MkDocs, served on localhost.

Served over HTTP rather than opened as files: the theme's search loads its index with a request
that browsers refuse for file:// pages, which would show as a console error that no reader sees.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def build_site(dest: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the repository's docs into `dest` (a warning fails the build)."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(dest)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no request lines in the test output
        pass


@contextlib.contextmanager
def served(site: Path) -> Iterator[str]:
    """The built site on http://127.0.0.1:<free port>/ for as long as the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
