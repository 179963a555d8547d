"""Section 2: sampling tokens/s by full recomputation versus the KV cache.

Same model, prompts, K and length in every mode; every row decodes exactly max_new_tokens
(EOS does not stop it), so each mode produces the same number of tokens:

- `full`: no cache, every step runs the model over the whole sequence so far (the baseline);
- `kv, prefill per row`: the cache, with each prompt prefilled once per row (`sampling.prefill=per_row`);
- `kv, shared prefill`: the cache, each prompt prefilled once and its cache copied to its K rows
  (what the trainer does).

Prompts are the reference workload: random 1-4-ply openings from the chess data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bench.results import add_table, new_section, set_headline
from bench.timing import interleaved_times, median
from trainer.config import SamplingConfig
from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
from trainer.model_config import BuiltinModelConfig
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.sampling.sampler import generate
from trainer.threads import torch_threads

TOKENIZER = CharTokenizer(CHESS_ALPHABET)

MODES = ("full", "kv, prefill per row", "kv, shared prefill")
TITLE = "2. Sampling: full recomputation vs KV cache"
HEADLINE = ("kv_cache_speedup",)
TARGET_KV_SPEEDUP = 5.0


@dataclass(frozen=True)
class SamplingPlan:
    sizes: tuple[str, ...] = ("tiny", "small")
    num_prompts: int = 8
    group_size: int = 8
    max_new_tokens: int = 64
    threads: int = 2
    repeats: int = 5
    warmup: int = 1
    device: str = "cpu"
    seed: int = 0


def reference_prompts(n: int, seed: int) -> list[list[int]]:
    """`n` encoded prompts of random 1-4-ply openings (the reference GRPO workload)."""
    return [TOKENIZER.encode_prompt(p.prompt) for p in generate_pairs(n, seed=seed, min_plies=1, max_plies=4)]


def _mode_fn(model: GPT, prompts: list[list[int]], mode: str, plan: SamplingPlan):
    k = plan.group_size
    cached = mode != "full"
    cfg = SamplingConfig(
        group_size=k,
        max_new_tokens=plan.max_new_tokens,
        use_kv_cache=cached,
        prefill="per_row" if mode == "kv, prefill per row" else "shared",
    )
    device = torch.device(plan.device)

    def run(round_index: int) -> None:
        gen = torch.Generator(device=device).manual_seed(plan.seed + round_index)
        generate(model, prompts, cfg, TOKENIZER, gen, stop_at_eos=False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return run


def measure_size(size: str, plan: SamplingPlan) -> dict[str, Any]:
    """Seconds per call of each mode for one model size, modes interleaved."""
    torch.manual_seed(plan.seed)
    prompts = reference_prompts(plan.num_prompts, plan.seed)
    model = GPT(BuiltinModelConfig(size=size), TOKENIZER.vocab_size).to(plan.device)
    with torch_threads(plan.threads if plan.device == "cpu" else None):
        times = interleaved_times(
            {m: _mode_fn(model, prompts, m, plan) for m in MODES}, plan.repeats, plan.warmup
        )
    tokens = plan.num_prompts * plan.group_size * plan.max_new_tokens
    return {
        "size": size,
        "tokens_per_call": tokens,
        "prompt_tokens_max": max(map(len, prompts)),
        "times_s": times,
        "tokens_per_s": {m: tokens / median(ts) for m, ts in times.items()},
    }


def bench_sampling(plan: SamplingPlan) -> dict[str, Any]:
    section = new_section("sampling", TITLE, owns=HEADLINE)
    results = {size: measure_size(size, plan) for size in plan.sizes}
    rows = []
    for size, r in results.items():
        tps = r["tokens_per_s"]
        full = tps["full"]
        for mode in MODES:
            rows.append([size, mode, tps[mode], tps[mode] / full])
        r["kv_speedup"] = tps["kv, shared prefill"] / full
        r["shared_prefill_gain"] = tps["kv, shared prefill"] / tps["kv, prefill per row"]
    add_table(
        section,
        f"Tokens/s, {plan.num_prompts} prompts x K={plan.group_size}, {plan.max_new_tokens} new tokens, "
        f"{plan.threads if plan.device == 'cpu' else 'all'} threads on {plan.device}",
        ["model", "mode", "tokens/s", "vs full"],
        rows,
    )
    section["data"] = {"plan": plan.__dict__, "results": results}
    for size, r in results.items():
        section["notes"].append(
            f"{size}: KV cache {r['kv_speedup']:.1f}x full recomputation (target >= {TARGET_KV_SPEEDUP:g}x); "
            f"sharing the prompt prefill across the K rows adds {r['shared_prefill_gain']:.2f}x over prefilling "
            f"each row (prompts of at most {r['prompt_tokens_max']} tokens, so the prefill is a small part)."
        )
    if "tiny" in results:
        set_headline(section, "kv_cache_speedup", results["tiny"]["kv_speedup"])
    else:
        set_headline(section, "kv_cache_speedup", None, "the tiny model was not in this plan")
    return section
