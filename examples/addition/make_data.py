"""Write a multi-digit addition data set for the `text` task: train.jsonl and eval.jsonl.

    python examples/addition/make_data.py --out examples/addition/data [--seed 0] [--digits 2]

Each row is {"prompt": "47+85=", "target": "132", "a": 47, "b": 85}: operands of 1 to `digits`
digits (each length equally likely), the sum as the target, and the operands as fields the reward
takes by name. The same seed writes the same files; no held-out prompt appears in train.jsonl.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def operand(rng: random.Random, digits: int) -> int:
    """A number of 1..digits digits, each length equally likely (so short sums are not rare)."""
    length = rng.randint(1, digits)
    return rng.randint(0 if length == 1 else 10 ** (length - 1), 10**length - 1)


def row(a: int, b: int) -> dict:
    return {"prompt": f"{a}+{b}=", "target": str(a + b), "a": a, "b": b}


def make(seed: int, digits: int, train: int, held_out: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows) with disjoint prompts; deterministic in the arguments."""
    rng = random.Random(seed)
    held, seen = [], set()
    while len(held) < held_out:
        a, b = operand(rng, digits), operand(rng, digits)
        if (a, b) not in seen:
            seen.add((a, b))
            held.append(row(a, b))
    rows = []
    while len(rows) < train:
        a, b = operand(rng, digits), operand(rng, digits)
        if (a, b) not in seen:  # training may repeat a pair, never a held-out one
            rows.append(row(a, b))
    return rows, held


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default="examples/addition/data", help="folder for train.jsonl and eval.jsonl"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--digits", type=int, default=2, help="most digits of an operand")
    parser.add_argument("--train", type=int, default=20000, help="training rows")
    parser.add_argument("--eval", type=int, default=200, help="held-out rows")
    args = parser.parse_args()
    if args.digits < 1 or args.train < 1 or args.eval < 1:
        parser.error("--digits, --train and --eval must be at least 1")
    if args.eval > (10**args.digits) ** 2 // 2:
        parser.error(f"--eval {args.eval} is more than half of the {(10**args.digits) ** 2} possible prompts")
    train, held = make(args.seed, args.digits, args.train, args.eval)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "train.jsonl", train)
    write_jsonl(out / "eval.jsonl", held)
    print(
        f"wrote {len(train)} training rows to {out / 'train.jsonl'} and {len(held)} held-out rows to {out / 'eval.jsonl'}"
    )


if __name__ == "__main__":
    main()
