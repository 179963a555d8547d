"""`python -m service.report RUN_DIR`: redraw a run's report from its records."""

import sys

from service.report import write_html_report, write_report

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m service.report RUN_DIR")
    print(write_report(sys.argv[1]))
    print(write_html_report(sys.argv[1]))
