"""Screenshots for the docs: the terminal during a demo run, and the run's report.html.

    python docs/screenshots.py [--preset demo] [--out docs]

Runs `python -m service.train` in a detached tmux window of 120 x 32 characters, captures the
pane (with its colours) once GRPO is under way and once the run has ended, renders each capture
as HTML (rich) and photographs it, and report.html, in headless Chromium. Writes
docs/terminal_during_run.png, docs/terminal_end.png, docs/report_html.png,
docs/report_html_samples.png and docs/demo_report.png (the run's report.png).
Needs tmux, chromium and chromium-driver, and the dev extra (selenium, rich).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the headless Chromium helper the tests use

from headless import headless_chromium  # noqa: E402

COLUMNS, ROWS = 120, 32


def _grpo_steps_done(run_dir: Path) -> int:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines if '"phase":"grpo"' in line)


def _capture(session: str) -> str:
    """The pane's text with its colours, without the blank rows below the last line."""
    text = subprocess.run(
        ["tmux", "capture-pane", "-p", "-e", "-t", session], check=True, capture_output=True, text=True
    ).stdout
    rows = text.splitlines()
    while rows and not re.sub(r"\x1b\[[0-9;]*m", "", rows[-1]).strip():
        rows.pop()
    return "\n".join(rows) + "\n"


def run_in_tmux(preset: str, run_dir: Path, grpo_steps_before_shot: int, timeout_s: float) -> tuple[str, str]:
    """(capture during GRPO, capture at the end) of a training run in a detached tmux session."""
    session = f"grpo-shot-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    command = f"cd {REPO} && PYTHONPATH={REPO} {sys.executable} -m service.train --preset {preset} --run-dir {run_dir}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", str(COLUMNS), "-y", str(ROWS),
         f"{command}; echo; read -r -t 600 _"],
        check=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout_s
        while _grpo_steps_done(run_dir) < grpo_steps_before_shot:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no GRPO step {grpo_steps_before_shot} within {timeout_s:.0f}s")
            time.sleep(1.0)
        during = _capture(session)
        while not (run_dir / "report.html").exists() or "[train] records in" not in _capture(session):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run did not end within {timeout_s:.0f}s")
            time.sleep(2.0)
        return during, _capture(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


def terminal_html(capture: str, title: str) -> str:
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=COLUMNS, file=open(os.devnull, "w"), force_terminal=True)
    console.print(Text.from_ansi(capture.rstrip("\n")))
    return console.export_html(inline_styles=True, code_format=(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + title + "</title></head>"
        "<body style='margin:0;background:#1e1e1e;overflow:hidden'><pre style='margin:0;padding:12px;color:#ddd;"
        "font-family:DejaVu Sans Mono,monospace;font-size:14px;line-height:1.25'>{code}</pre></body></html>"
    ))  # fmt: skip


def crop_bottom(path: Path, margin: int = 12) -> None:
    """Cut the rows of background colour below the last line of a terminal screenshot."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    background = image.getpixel((image.width - 1, image.height - 1))
    bottom = image.height
    while bottom > 1 and all(image.getpixel((x, bottom - 1)) == background for x in range(0, image.width, 4)):
        bottom -= 1
    image.crop((0, 0, image.width, min(image.height, bottom + margin))).save(path)


def photograph(
    url: str, out: Path, width: int, height: int | None = None, scroll_to: str | None = None
) -> None:
    """A screenshot of exactly width x height CSS pixels (height None: the whole page)."""
    with headless_chromium(width, 900) as browser:
        browser.get(url)
        if height is None:
            height = int(browser.execute_script("return document.documentElement.scrollHeight"))
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        if scroll_to:
            browser.execute_script(
                f'document.evaluate("{scroll_to}", document, null, 9, null).singleNodeValue.scrollIntoView()'
            )
        browser.save_screenshot(str(out))
    print(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--out", default=str(REPO / "docs"))
    parser.add_argument("--grpo-steps", type=int, default=30, help="GRPO steps done before the mid-run shot")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    out = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="grpo-shots-"))
    run_dir = work / "run"
    try:
        during, end = run_in_tmux(args.preset, run_dir, args.grpo_steps, args.timeout)
        for name, capture in (("terminal_during_run", during), ("terminal_end", end)):
            page = work / f"{name}.html"
            page.write_text(terminal_html(capture, name))
            photograph(page.as_uri(), out / f"{name}.png", 1060)
            crop_bottom(out / f"{name}.png")
        photograph((run_dir / "report.html").as_uri(), out / "report_html.png", 1280, 1500)
        photograph((run_dir / "report.html").as_uri(), out / "report_html_samples.png", 1280, 1100,
                   scroll_to="//h2[text()='Sample completions']")  # fmt: skip
        shutil.copyfile(run_dir / "report.png", out / "demo_report.png")
        print(json.dumps(json.loads((run_dir / "summary.json").read_text())["final_eval"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
