"""`python -m bench.publish [--add RUN ...] [--check]`: the docs' benchmark tables from the result files.

--add merges each run (a `python -m bench --out` directory or its bench.json) into its machine's
result file, `bench/results/<kind>.json` (`bench.result_file`); then the marked blocks of
docs/benchmarks.md and README.md are written again from every result file (`bench.docs_tables`),
and each machine's figures drawn under docs/figures/<kind>/. --check writes nothing and exits 1
when a page differs from what the result files give.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.docs_tables import FIGURES_DIR, blocks, fill
from bench.result_file import RESULTS_DIR, ResultFileError, add_run, load_results

REPO = Path(__file__).resolve().parents[1]
PAGES = (REPO / "docs" / "benchmarks.md", REPO / "README.md")


def pages(results_dir: Path = RESULTS_DIR) -> dict[Path, str]:
    """Each page as the result files make it."""
    made = blocks(load_results(results_dir))
    return {page: fill(page.read_text(), made) for page in PAGES}


def draw_figures(results_dir: Path = RESULTS_DIR) -> list[Path]:
    """Each machine's figures (the cost curve), under docs/figures/<kind>/."""
    from bench.plots import write_figures  # matplotlib only here

    written = []
    for result in load_results(results_dir):
        if any(section.get("figures") for section in result["sections"]):
            out = REPO / "docs" / FIGURES_DIR / result["kind"]
            out.mkdir(parents=True, exist_ok=True)
            written += write_figures(result, out)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.publish", description=__doc__)
    parser.add_argument("--add", nargs="+", default=[], metavar="RUN", help="runs to merge first")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    if args.check and args.add:
        parser.error("--check writes nothing: leave out --add")
    for run in args.add:
        try:
            path, report = add_run(Path(run))
        except ResultFileError as exc:
            print(f"python -m bench.publish: {exc}", file=sys.stderr)
            return 2
        print(f"{run} -> {path.relative_to(REPO)}: " + "; ".join(report))
    stale = []
    for page, text in pages().items():
        if page.read_text() != text:
            stale.append(page)
            if not args.check:
                page.write_text(text)
    if args.check:
        for page in stale:
            print(f"{page.relative_to(REPO)} differs from the result files: run python -m bench.publish")
        return 1 if stale else 0
    for path in draw_figures():
        print(f"drew {path.relative_to(REPO)}")
    print(
        "rewrote " + (", ".join(str(p.relative_to(REPO)) for p in stale) or "nothing: the pages were current")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
