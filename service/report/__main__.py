"""`python -m service.report RUN_DIR`: redraw a run's report (report.png, report.html) from its records."""

import argparse
import sys
from pathlib import Path

from service.report import write_html_report, write_report
from service.run_files import METRICS_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.report", description="Redraw a run's report.png and report.html."
    )
    parser.add_argument("run_dir", help="the run directory (holds metrics.jsonl)")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / METRICS_FILE).is_file():
        parser.print_usage(sys.stderr)
        print(f"error: {run_dir} holds no {METRICS_FILE}; it is not a run directory", file=sys.stderr)
        return 2
    print(write_report(run_dir, title=run_dir.name))
    print(write_html_report(run_dir, title=run_dir.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
