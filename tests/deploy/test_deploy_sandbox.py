"""Every image and CI machine can run untrusted code in isolation: bubblewrap is installed."""

from __future__ import annotations

import re

from deploy_files import DOCKERFILE, REPO


def _apt_installs(text: str) -> set[str]:
    packages: set[str] = set()
    for command in re.findall(r"apt-get install ([^&\n]+)", text):
        packages |= {word for word in command.split() if not word.startswith("-")}
    return packages


def test_the_image_installs_bubblewrap_as_root():
    text = DOCKERFILE.read_text()
    assert "bubblewrap" in _apt_installs(text)
    install = next(m.start() for m in re.finditer(r"RUN apt-get[^\n]*bubblewrap", text))
    assert text.rfind("USER root", 0, install) > text.rfind("USER ray", 0, install)


def test_ci_installs_bubblewrap_when_missing():
    text = (REPO / ".ci" / "run").read_text()
    assert "command -v bwrap" in text and "bubblewrap" in _apt_installs(text)
    assert text.index("bubblewrap") < text.index("python -m pytest")
