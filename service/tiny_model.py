"""`python -m service.tiny_model DIR [--arch llama|gpt2] [--seed N]`: a tiny random transformers model.

Writes a randomly initialised causal LM (2 layers, 128 wide, 256 positions) and a character
tokenizer covering the bundled tasks' text to DIR, loadable with `AutoModelForCausalLM` /
`AutoTokenizer`; `--set model.source=hf --set model.path=DIR` trains it. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.tiny_model", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", metavar="DIR")
    parser.add_argument("--arch", choices=("llama", "gpt2"), default="llama")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    try:
        from trainer.policy.hf_tiny import write_tiny_model
    except ImportError as exc:
        print(f"cannot make a model: {exc}; pip install -e '.[hf]'", file=sys.stderr)
        return 2
    path = write_tiny_model(args.out_dir, args.arch, seed=args.seed)
    print(f"wrote a tiny random {args.arch} model and its tokenizer to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
