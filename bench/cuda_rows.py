"""`python -m bench.cuda_rows`: the benchmark's CUDA rows, on a machine with a GPU and no Ray.

Four sections, written to DIR/bench.json and DIR/bench.md like `python -m bench`'s:
sampling (full recomputation against the KV cache, the 124M model included), the training step by
numeric mode (fp32, TF32, bf16, fused AdamW, torch.compile; MFU), and the `gpt2-4090` preset's GRPO
steps in process (bf16 eager, then compile and CUDA graphs of the decode step), and the memory plan's
estimate against the measured peak (the preset and a 1.5B transformers model, one rank). Only torch and the
project's pure packages are needed, so a GPU box without Ray measures them.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import torch

from bench.assemble import bench_result, run_section
from bench.gpu_memory import TITLE as MEMORY_TITLE
from bench.gpu_memory import bench_gpu_memory
from bench.gpu_steps import TITLE as STEPS_TITLE
from bench.gpu_steps import VARIANTS, bench_gpu_steps
from bench.machine import machine_info
from bench.results import HEADLINE_TARGETS, fmt, markdown_table, write_results
from bench.sampling import HEADLINE as SAMPLING_HEADLINE
from bench.sampling import TITLE as SAMPLING_TITLE
from bench.sampling import SamplingPlan, bench_sampling
from bench.train_step import HEADLINE as STEP_HEADLINE
from bench.train_step import TITLE as STEP_TITLE
from bench.train_step import TrainStepPlan, bench_train_step

# The 124M model decodes 16 prompts x 8 in fp32: its full-recomputation row stays a few seconds a call;
# `tiny` gives the headline `kv_cache_speedup` (tiny and small).
CUDA_SAMPLING = SamplingPlan(
    sizes=("tiny", "small", "gpt2"), num_prompts=16, group_size=8, max_new_tokens=64, repeats=3, device="cuda"
)

# name -> (title, the headline keys it owns)
SECTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sampling": (SAMPLING_TITLE, SAMPLING_HEADLINE),
    "train_step": (STEP_TITLE, STEP_HEADLINE),
    "gpu_steps": (STEPS_TITLE, ()),
    "gpu_memory": (MEMORY_TITLE, ()),
}


def _section_fn(name: str, args: argparse.Namespace):
    if name == "sampling":
        return lambda: bench_sampling(CUDA_SAMPLING)
    if name == "train_step":
        return lambda: bench_train_step(TrainStepPlan())
    if name == "gpu_memory":
        return lambda: bench_gpu_memory()
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    return lambda: bench_gpu_steps(args.preset, args.warmup, args.steps, variants=variants)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cuda_rows", description=__doc__)
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated, of {list(SECTIONS)}"
    )
    parser.add_argument("--out", default="bench-cuda", help="directory for bench.json and bench.md")
    parser.add_argument("--preset", default="gpt2-4090", help="the preset of the gpu_steps section")
    parser.add_argument("--warmup", type=int, default=2, help="gpu_steps: untimed steps per variant")
    parser.add_argument("--steps", type=int, default=4, help="gpu_steps: timed steps per variant")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"gpu_steps: comma-separated, of {list(VARIANTS)}"
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.sections.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    # always in SECTIONS' order: a trainer's sections set TF32 for the process, which the sampling
    # section's fp32 rows must not inherit
    names = [n for n in SECTIONS if n in names]
    if not torch.cuda.is_available():
        print("no CUDA device: these rows need one", file=sys.stderr)
        return 2
    began = time.perf_counter()
    info = machine_info()
    sections = []
    for name in names:
        title, owns = SECTIONS[name]
        done = run_section(name, (title,), owns, _section_fn(name, args))
        sections += done
        for section in done:  # each section's tables as soon as it ends: a cut-off run keeps them
            print(f"{name}: {section['status']} in {section['elapsed_s']:.0f} s {section['error'] or ''}")
            print(
                "\n".join(line for table in section["tables"] for line in markdown_table(table)), flush=True
            )
    command = "python -m bench.cuda_rows " + shlex.join(argv if argv is not None else sys.argv[1:])
    result = bench_result(sections, command.strip(), "cuda", info, began)
    json_path, md_path = write_results(result, args.out)
    for key, value in result["headline"].items():
        if any(key in s["owns"] for s in sections):
            print(f"{key}: {fmt(value)}  ({HEADLINE_TARGETS.get(key, '')})")
    print(f"wrote {json_path} and {md_path}")
    return 0 if all(s["status"] == "ok" for s in sections) else 1


if __name__ == "__main__":
    sys.exit(main())
