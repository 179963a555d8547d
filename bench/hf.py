"""Section 6: the transformers policy against the built-in GPT, at equal shapes, work and settings.

Both are 2 layers, 128 wide, 4 heads (the built-in `tiny` GPT and a GPT-2 made by
`service.tiny_model`, whose character vocabulary is 101 tokens against the chess alphabet's 46),
at the precision, attention and decoding dtype `auto` gives on the machine, with the same
sampling, GRPO and optimiser settings and in-process scoring, each run as the service runs it
(`Trainer.grpo_step`), every completion decoded to `max_new_tokens` (EOS ignored), so both do the
same work whatever lengths each policy would sample. A third row runs the same hf policy with
GPT-2's `gelu_new` as transformers defines it, to show what `trainer/policy/hf_gelu.py` changes.
Steps alternate between the policies so that load drifts hit them alike; medians are reported.

    hf_completions_per_s   completions per second of a whole GRPO step on the hf path
    hf_vs_builtin          that over the built-in GPT's (target: >= 0.7)
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from bench.inline_scoring import scorer_rewards
from bench.results import add_table, new_section, set_headline
from bench.timing import median
from rewards import FenScorer, RewardConfig
from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.policy import CharTokenizer, build_policy

TITLE = "6. The transformers policy against the built-in GPT"
HEADLINE = ("hf_completions_per_s", "hf_vs_builtin")


@dataclass(frozen=True)
class HFPlan:
    steps: int = 3
    warmup: int = 1
    prompts: int = 8
    group_size: int = 8
    max_new_tokens: int = 60


def _config(plan: HFPlan, model: dict[str, Any]) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "model": {"block_size": 256, **model},
            "sampling": {
                "group_size": plan.group_size, "max_new_tokens": plan.max_new_tokens,
                "prompts_per_microbatch": plan.prompts,
            },
            "grpo": {"prompts_per_step": plan.prompts, "beta": 0.04, "zero_var_groups": "keep"},
        }
    )  # fmt: skip


STOCK_GELU = "hf, transformers' own gelu_new"


def _with_stock_gelu(trainer: Trainer) -> Trainer:
    """The hf trainer with GPT-2's activation as transformers defines it (the policy replaces it
    with `trainer.policy.hf_gelu.GeluNew`: the same values, fewer temporaries)."""
    from transformers.activations import NewGELUActivation

    from trainer.policy.hf_gelu import GeluNew, swap_modules

    swap_modules(trainer.model, GeluNew, NewGELUActivation)
    return trainer


def _trainers(plan: HFPlan, model_dir: str) -> dict[str, Trainer]:
    from trainer.policy.hf_tiny import write_tiny_model

    write_tiny_model(model_dir, "gpt2", positions=256)
    builtin = _config(plan, {"size": "tiny"})
    hf = _config(plan, {"source": "hf", "path": model_dir})
    return {  # all built, whichever are timed: the same order of work either way
        "builtin": Trainer(builtin, policy=build_policy(builtin, CharTokenizer(CHESS_ALPHABET))),
        "hf": Trainer(hf, policy=build_policy(hf)),
        STOCK_GELU: _with_stock_gelu(Trainer(hf, policy=build_policy(hf))),
    }


def bench_rates(
    plan: HFPlan, policies: tuple[str, ...] = ("builtin", "hf", STOCK_GELU), fixed_length: bool = False
) -> dict[str, list[float]]:
    """Completions/s of each timed GRPO step of each policy (steps alternate between them), and
    under the key `<policy>/<phase>` the step's sampling and update seconds and its completion
    tokens per second (`<policy>/tokens_per_s`). fixed_length: every
    completion decodes max_new_tokens (EOS ignored)."""
    pairs = generate_pairs(plan.prompts, seed=5, min_plies=1, max_plies=4)
    rewards = InlineRewards(scorer_rewards(FenScorer(RewardConfig())))
    out: dict[str, list[float]] = {
        k: [] for p in policies for k in (p, f"{p}/sample_s", f"{p}/update_s", f"{p}/tokens_per_s")
    }
    with tempfile.TemporaryDirectory(prefix="bench-hf-") as model_dir:
        trainers = {k: v for k, v in _trainers(plan, model_dir).items() if k in policies}
        for trainer in trainers.values():
            trainer.sampler.fixed_length = fixed_length
        for i in range(plan.warmup + plan.steps):
            for name, trainer in trainers.items():
                m = trainer.grpo_step(pairs, rewards)
                if i >= plan.warmup:
                    out[name].append(m["completions"] / m["step_time_s"])
                    out[f"{name}/tokens_per_s"].append(float(m["tokens"]) / m["step_time_s"])
                    for phase in ("sample_s", "update_s"):
                        out[f"{name}/{phase}"].append(m[phase])
    return out


def _precision_note() -> str:
    """What `auto` resolves to for these runs (both policies are 128 wide)."""
    from trainer.precision import resolve_dtype, resolve_sampling_dtype

    dtype, _ = resolve_dtype("auto", "cpu", 128)
    decoding, _ = resolve_sampling_dtype("auto", dtype, "cpu", 128)
    return f"{dtype} (decoding in {decoding}; precision.dtype auto on this machine)"


def bench_hf(plan: HFPlan) -> dict[str, Any]:
    section = new_section("hf", TITLE, owns=HEADLINE)
    rates = bench_rates(plan, fixed_length=True)  # equal work: both decode every completion in full
    rows = [
        [
            p,
            *(median(rates[k]) for k in (p, f"{p}/tokens_per_s", f"{p}/sample_s", f"{p}/update_s")),
            median(rates[p]) / median(rates["builtin"]),
        ]
        for p in ("builtin", "hf", STOCK_GELU)
    ]
    columns = ["policy", "completions/s", "completion tokens/s", "sample_s", "update_s", "vs builtin"]
    add_table(section, "GRPO step, medians", columns, rows)
    hf, builtin = median(rates["hf"]), median(rates["builtin"])
    set_headline(section, "hf_completions_per_s", hf)
    set_headline(section, "hf_vs_builtin", hf / builtin)
    section["data"] = {"rates": rates, "plan": plan.__dict__}
    section["notes"] += [
        f"{plan.prompts} prompts x {plan.group_size} completions of {plan.max_new_tokens} tokens each (EOS "
        f"ignored: equal work, whatever each policy would sample), {_precision_note()}, in-process scoring; "
        "steps alternate between the policies",
        f"'{STOCK_GELU}': the same hf policy with GPT-2's `NewGELUActivation` as transformers defines it, "
        "in place of the policy's `GeluNew` (equal values, fewer temporaries); not a headline",
    ]
    return section
