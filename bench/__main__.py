"""`python -m bench [--quick] [--sections ...] --out DIR`: measure, then write DIR/bench.json and DIR/bench.md
(`python -m service.bench` runs the same)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shlex
import sys

from bench.plan import OPTIONAL_SECTIONS, SECTIONS, full_plan, quick_plan
from bench.results import HEADLINE_TARGETS, fmt, write_results
from bench.runner import run_bench


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every section at its smallest useful size, every headline key still measured",
    )
    parser.add_argument("--out", required=True, help="directory for bench.json and bench.md")
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS + OPTIONAL_SECTIONS,
        default=list(SECTIONS),
        help=f"run only these sections ({', '.join(OPTIONAL_SECTIONS)}: only when named)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    plan = quick_plan() if args.quick else full_plan()
    plan = dataclasses.replace(plan, sections=tuple(args.sections))
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    result = run_bench(plan, command)
    json_path, md_path = write_results(result, args.out)
    for key in HEADLINE_TARGETS:
        note = result["headline_notes"].get(key)
        print(f"{key:>24}: {fmt(result['headline'][key])}" + (f"  ({note})" if note else ""))
    print(
        f"wrote {json_path} and {md_path}; `python -m bench.publish --add {args.out}` puts them in the docs"
    )
    failed = [s["title"] for s in result["sections"] if s["status"] == "error"]
    if failed:
        print(f"sections that failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
