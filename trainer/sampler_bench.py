"""Sampler throughput with and without the KV cache, on one model, batch and length.

Every row decodes exactly max_new_tokens (EOS does not stop it), so both modes produce the same
number of tokens. The two modes alternate within each repeat so that background load affects
both alike; the median of the timed repeats is reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Iterator

import torch

from trainer.config import ModelConfig, SamplingConfig
from trainer.model import GPT
from trainer.sampler import generate
from trainer.tokenizer import TOKENIZER

# A Ruy Lopez main line; prompts are its first 1..16 plies, so their lengths differ (left padding).
_OPENING = "e4 e5 Nf3 Nc6 Bb5 a6 Ba4 Nf6 O-O Be7 Re1 b5 Bb3 d6 c3 O-O".split()

MODES = {"kv_cache": True, "full": False}


def bench_prompts(num_prompts: int) -> list[list[int]]:
    """Deterministic SAN prompts of varying length, encoded with `encode_prompt`."""
    return [
        TOKENIZER.encode_prompt(" ".join(_OPENING[: 1 + (3 * i) % len(_OPENING)])) for i in range(num_prompts)
    ]


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _time_once(model: GPT, prompts: list[list[int]], cfg: SamplingConfig, seed: int) -> float:
    device = model.transformer.wte.weight.device
    gen = torch.Generator(device=device).manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    generate(model, prompts, cfg, TOKENIZER, gen, stop_at_eos=False)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def measure_sampling(
    size: str = "tiny",
    *,
    num_prompts: int = 8,
    group_size: int = 8,
    max_new_tokens: int = 64,
    threads: int | None = 2,
    repeats: int = 5,
    warmup: int = 1,
    device: str = "cpu",
    modes: tuple[str, ...] = ("kv_cache", "full"),
    seed: int = 0,
) -> dict:
    """Sampled tokens per second of a random-init `size` model for each mode in `modes`.

    Returns {"size", "device", "threads", "num_prompts", "group_size", "max_new_tokens",
    "tokens_per_call", "non_embedding_params", "<mode>": {"median_s", "tokens_per_s", "times_s"},
    and "kv_speedup" (full median / kv_cache median) when both modes ran}.
    """
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"modes must be a non-empty subset of {sorted(MODES)}, got {list(modes)}")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats} warmup={warmup}")
    torch.manual_seed(seed)
    prompts = bench_prompts(num_prompts)
    block = max(256, max(map(len, prompts)) + max_new_tokens)
    model = GPT(ModelConfig(size=size, block_size=block), TOKENIZER.vocab_size).to(device)
    cfgs = {
        m: SamplingConfig(group_size=group_size, max_new_tokens=max_new_tokens, use_kv_cache=MODES[m])
        for m in modes
    }
    times: dict[str, list[float]] = {m: [] for m in modes}
    with _threads(threads if device == "cpu" else None):
        for i in range(warmup + repeats):
            for m in modes:
                elapsed = _time_once(model, prompts, cfgs[m], seed + i)
                if i >= warmup:
                    times[m].append(elapsed)
    tokens = num_prompts * group_size * max_new_tokens
    result: dict = {
        "size": size,
        "device": device,
        "threads": threads if device == "cpu" else None,
        "num_prompts": num_prompts,
        "group_size": group_size,
        "max_new_tokens": max_new_tokens,
        "tokens_per_call": tokens,
        "non_embedding_params": model.num_params(non_embedding=True),
    }
    for m in modes:
        median = statistics.median(times[m])
        result[m] = {"median_s": median, "tokens_per_s": tokens / median, "times_s": times[m]}
    if "kv_cache" in result and "full" in result:
        result["kv_speedup"] = result["full"]["median_s"] / result["kv_cache"]["median_s"]
    return result


def main(argv: list[str] | None = None) -> None:
    """`python -m trainer.sampler_bench [--sizes tiny small] [--repeats 5]`: print JSON results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"], choices=["tiny", "small", "gpt2"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    for size in args.sizes:
        res = measure_sampling(
            size, repeats=args.repeats, warmup=args.warmup, threads=args.threads, device=args.device
        )
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
