"""Sections 4 and 5: whole GRPO steps, their time split, and the ablation of each optimisation.

The reference configuration: a `tiny` GPT (2 layers, 128 wide, 4 heads) over the character
vocabulary; 8 prompts of random 1-4-ply openings per step, K = 8, at most 64 new tokens,
stopping at EOS; beta = 0.04 (a reference model); fp32; one optimisation pass per rollout;
rewards from the default scorer; 2 torch threads. What the reference leaves open (micro-batch
size, the reward pool's shape, SFT settings) is taken from the service's `demo` preset, which is
how the service runs on a 2-core machine.

Each configuration runs in a process of its own (`grpo_trial.run_trial`), so its peak memory is
its own; with `rounds` > 1 every configuration runs once per round, interleaved with the others.
The policy is either freshly initialised or warmed by SFT first, as the service does. Either way
a micro-batch decodes until its last row stops, so with 64 rows it nearly always runs the full 64
steps; the SFT-warm policy writes longer completions (a whole FEN) than the fresh one.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch

from bench.grpo_rows import REFERENCE_ROW, SHARED_PREFIX_ROW, reference_rows, shipped_rows
from bench.grpo_trial import merge_trials
from bench.isolated import run_isolated
from bench.results import add_table, new_section, set_headline
from bench.timing import interleaved_times
from service.presets import PRESETS
from trainer.config import TrainerConfig
from trainer.policy.linear_kernel import onednn_available, onednn_linear
from trainer.threads import torch_threads

GRPO_HEADLINE = (
    "reward_wait_fraction",
    "grpo_completions_per_s",
    "grpo_completions_per_s_default",
    "step_roofline_fraction",
)
TARGET_REWARD_FRACTION = 0.05
_TRIAL = "bench.grpo_trial:run_trial"


@dataclass(frozen=True)
class GRPOPlan:
    steps: int = 8
    warmup: int = 2
    baseline_steps: int = 4  # the no-cache baseline is slow; fewer timed steps
    threads: int = 2
    sft_steps: int = 300
    extras: bool = True  # section 4's extra rows: fresh policy, two micro-batches, one thread
    max_new_tokens: int = 64  # the reference; tests shrink it
    rounds: int = 1  # each configuration runs this many times, interleaved with the others
    unshipped_rows: bool = True  # also measure optimisations the shipped settings leave off (compile on CPU)


def reference_config(sft_steps: int, max_new_tokens: int = 64) -> dict[str, Any]:
    """The reference configuration as a TrainerConfig dict (fp32, TF32 off, no compile)."""
    demo = PRESETS["demo"]
    cfg = TrainerConfig.model_validate(
        {
            "model": {"size": "tiny", "block_size": demo["model"]["block_size"]},
            "sampling": {
                "group_size": 8,
                "max_new_tokens": max_new_tokens,
                "prompts_per_microbatch": demo["sampling"]["prompts_per_microbatch"],
            },
            "grpo": {"prompts_per_step": 8, "beta": 0.04, "passes": 1},
            "sft": {**demo["sft"], "steps": sft_steps},
            "optim": demo.get("optim", {}),
            "precision": {"dtype": "fp32", "tf32": False},
        }
    )
    return cfg.model_dump(mode="json")


def matmul_gflops(threads: int, repeats: int = 20) -> float:
    """This CPU's fp32 matmul rate at the update's shapes ([64*74, 128] x [128, 512]), GFLOP/s:
    what the whole step would run at if every FLOP were a large, efficient matmul, by the faster
    of torch's own kernel and oneDNN's (`trainer.policy.linear_kernel`). The fastest repeat is
    taken: this is a ceiling, and background load only ever lowers it."""
    m, k, n = 64 * 74, 128, 512
    with torch_threads(threads):
        a, w = torch.randn(m, k), torch.randn(n, k)
        kernels = {"torch": lambda _: torch.nn.functional.linear(a, w)}
        if onednn_available():
            kernels["onednn"] = lambda _: onednn_linear(a, w)
        times = interleaved_times(kernels, repeats, warmup=3)
    return 2 * m * k * n / min(min(t) for t in times.values()) / 1e9


def with_updates(cfg: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """A copy of a config dict with `{"section.key": value}` set, validated again."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in cfg.items()}
    for dotted, value in updates.items():
        section, key = dotted.split(".")
        out[section][key] = value
    return TrainerConfig.model_validate(out).model_dump(mode="json")


class Runner:
    """Runs trials of one plan against one Ray cluster and one SFT-warmed policy."""

    def __init__(self, plan: GRPOPlan, device: str, weights: str, gcs: str | None = None):
        self.plan, self.device, self.weights = plan, device, weights
        self.pool_cfg = dict(PRESETS["demo"]["pool"])
        self.gcs = gcs or ray.get_runtime_context().gcs_address

    def kwargs(self, cfg: dict, options: dict, warm: bool = True, **overrides: Any) -> dict[str, Any]:
        return {
            "trainer_cfg": cfg,
            "steps": self.plan.steps,
            "warmup": self.plan.warmup,
            "threads": self.plan.threads,
            "device": self.device,
            "pool_cfg": self.pool_cfg,
            "gcs_address": self.gcs,
            "init_weights": self.weights if warm else None,
            **options,
            **overrides,
        }

    def run_round(self, trials: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each trial once, in order, each in a fresh process (with its `env`, if any)."""
        out = {}
        for name, kwargs in trials.items():
            kwargs = dict(kwargs)
            env = kwargs.pop("env", None)
            out[name] = run_isolated(_TRIAL, kwargs, env=env)
        return out

    @staticmethod
    def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
        return merge_trials(runs)

    def run_all(self, trials: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Every trial once per round, in the same order each round, so a burst of background load
        is spread over the configurations instead of landing on one; results merged per trial."""
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trials}
        for _ in range(self.plan.rounds):
            for name, result in self.run_round(trials).items():
                runs[name].append(result)
        return {name: merge_trials(r) for name, r in runs.items()}


def bench_grpo(plan: GRPOPlan) -> list[dict[str, Any]]:
    """Sections 4 and 5 (needs `ray.init` done by the caller)."""
    if not ray.is_initialized():
        raise RuntimeError("the GRPO sections need Ray: call ray.init(...) first")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    base = reference_config(plan.sft_steps, plan.max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="bench-sft-") as tmp:
        weights = str(Path(tmp) / "sft.pt")
        sft = run_isolated(
            "bench.grpo_trial:sft_warm_start",
            {"trainer_cfg": base, "out_path": weights, "threads": plan.threads, "device": device},
        )
        runner = Runner(plan, device, weights)
        later, not_run, default_row = shipped_rows(device, plan.threads, plan.unshipped_rows)
        rows = reference_rows() + later
        trials = {}
        for name, updates, options in rows:
            steps = {"steps": plan.baseline_steps} if name.startswith("baseline") else {}
            trials[name] = runner.kwargs(with_updates(base, updates), options, **steps)
        if plan.extras:
            trials.update(_extras(runner, base))
        results = runner.run_all(trials)
    ablation = {name: results[name] for name, _, _ in rows}
    extras = {name: r for name, r in results.items() if name not in ablation}
    matmul = matmul_gflops(plan.threads) if device == "cpu" else None
    split = _split_section(plan, sft, ablation, extras, device, matmul, default_row)
    split["data"]["reference_config"] = base
    return [split, _ablation_section(ablation, device, not_run)]


def _extras(runner: Runner, base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    two = with_updates(base, {"sampling.prompts_per_microbatch": 4})
    return {
        "fresh policy, serial scoring": runner.kwargs(base, {"rewards": "inline"}, warm=False),
        "fresh policy, streamed pool scoring": runner.kwargs(base, {"rewards": "pool"}, warm=False),
        "SFT-warm, streamed, 2 micro-batches of 4 prompts": runner.kwargs(two, {"rewards": "pool"}),
        "SFT-warm, streamed, 1 torch thread": runner.kwargs(base, {"rewards": "pool"}, threads=1),
    }


def _tokens_per_s(r: dict[str, Any]) -> float:
    """Completion tokens per second (EOS included); from the completions and their mean length in
    records written before trials measured it."""
    return r.get("tokens_per_s") or r["completions_per_s"] * r["completion_tokens"]


def _split_row(name: str, r: dict[str, Any]) -> list[Any]:
    return [
        name,
        r["sample_only_s"] * 1e3,
        r["reward_critical_s"] * 1e3,
        r["ref_s"] * 1e3,
        r["update_s"] * 1e3,
        r["step_s"] * 1e3,
        r["completions_per_s"],
        _tokens_per_s(r),
        r["reward_fraction"],
        r["completion_tokens"],
        r["no_eos_frac"],
        r["gflop"],
        r["gflop_per_s"],
    ]


SPLIT_COLUMNS = [
    "configuration",
    "sampling ms",
    "reward on critical path ms",
    "reference ms",
    "update ms",
    "step ms",
    "completions/s",
    "completion tokens/s",
    "reward share",
    "mean completion tokens",
    "share without EOS",
    "GFLOP (est.)",
    "GFLOP/s",
]


def _split_rows(ablation: dict, extras: dict, default_name: str) -> list:
    """The split table's rows: serial, streamed, the reference, the shipped settings, then extras."""
    default = ablation[default_name]
    rows = [
        _split_row("SFT-warm, serial scoring (inline, after sampling)", ablation["+ shared prefill"]),
        _split_row("SFT-warm, streamed pool scoring", ablation["+ streamed pool scoring"]),
        _split_row(
            "SFT-warm, streamed, trimmed log-prob pass", ablation["+ log-prob pass only where needed"]
        ),
        _split_row("SFT-warm, streamed, trimmed, prompt run once per group", ablation[SHARED_PREFIX_ROW]),
        _split_row("the same, linear kernel as auto picks (reference)", ablation[REFERENCE_ROW]),
    ]
    if default is not ablation[REFERENCE_ROW]:
        rows.append(_split_row(f"shipped settings ({default_name.removeprefix('+ ')})", default))
    return rows + [_split_row(name, r) for name, r in extras.items()]


def _roofline(section: dict, plan: GRPOPlan, ref: dict, matmul_gflops_s: float | None) -> None:
    """`step_roofline_fraction`: the reference step's GFLOP/s over the matmul rate measured here."""
    if not matmul_gflops_s:
        set_headline(section, "step_roofline_fraction", None, "the matmul ceiling is measured on CPU only")
        return
    ceiling = ref["completions"] / (ref["gflop"] / matmul_gflops_s)
    section["notes"].append(
        f"This CPU's fp32 matmul rate at the update's shapes, {plan.threads} threads (fastest of 20): "
        f"{matmul_gflops_s:.0f} GFLOP/s; the reference step ran at {ref['gflop_per_s']:.0f} GFLOP/s "
        f"({ref['gflop_per_s'] / matmul_gflops_s:.0%} of it); "
        f"a step whose every FLOP ran at that rate would give {ceiling:.0f} completions/s."
    )
    set_headline(section, "step_roofline_fraction", ref["gflop_per_s"] / matmul_gflops_s)


def _split_notes(sft: dict, ref: dict) -> list[str]:
    return [
        f"SFT warm start: {sft['steps']} steps ({sft['seconds']:.0f} s), loss {sft['first_loss']:.2f} -> "
        f"{sft['final_loss']:.2f}; the headline uses the SFT-warm policy with streamed pool scoring.",
        "Reward on the critical path = time inside `submit` (scoring itself when inline; chunking and "
        "`ray.put` for the pool) + time blocked in `collect`. Sampling excludes it. The step includes "
        "writing its metrics line.",
        f"Pool: the demo preset's {PRESETS['demo']['pool']}; micro-batches of "
        f"{PRESETS['demo']['sampling']['prompts_per_microbatch']} prompts (the demo preset).",
        f"Reference step: of {ref['step_s'] * 1e3:.0f} ms, sampling takes {ref['sample_only_s'] * 1e3:.0f} ms, "
        f"the reference pass {ref['ref_s'] * 1e3:.0f} ms, the update {ref['update_s'] * 1e3:.0f} ms and rewards "
        f"{ref['reward_critical_s'] * 1e3:.1f} ms; about {ref['gflop']:.1f} GFLOP (estimated from the sampled "
        f"shapes) at {ref['gflop_per_s']:.0f} GFLOP/s.",
    ]


def _split_section(
    plan: GRPOPlan,
    sft: dict,
    ablation: dict,
    extras: dict,
    device: str,
    matmul_gflops_s: float | None,
    default_name: str,
) -> dict[str, Any]:
    section = new_section("grpo_step", "4. A whole GRPO step", owns=GRPO_HEADLINE)
    default, ref = ablation[default_name], ablation[REFERENCE_ROW]
    add_table(
        section,
        f"Median step split, reference configuration ({plan.max_new_tokens} new tokens), {plan.threads} threads on {device}",
        SPLIT_COLUMNS,
        _split_rows(ablation, extras, default_name),
    )
    section["notes"] += _split_notes(sft, ref)
    _roofline(section, plan, ref, matmul_gflops_s)
    section["notes"].append(
        f"Shipped settings (`grpo_completions_per_s_default`, the ablation's row {default_name!r}): "
        f"{default.get('runtime')}; "
        f"the reference: {ref.get('runtime')}."
    )
    set_headline(section, "grpo_completions_per_s_default", default["completions_per_s"])
    if ref["reward_fraction"] > TARGET_REWARD_FRACTION:
        section["notes"].append(
            f"Reward on the critical path is {ref['reward_fraction']:.1%} of the step, above the "
            f"{TARGET_REWARD_FRACTION:.0%} target: {ref['reward_submit_s'] * 1e3:.1f} ms in submit, "
            f"{ref['reward_wait_s'] * 1e3:.1f} ms waiting in collect."
        )
    section["data"] = {
        "plan": plan.__dict__,
        "sft": sft,
        "extras": extras,
        "matmul_gflops_s": matmul_gflops_s,
    }
    set_headline(section, "grpo_completions_per_s", ref["completions_per_s"])
    set_headline(section, "reward_wait_fraction", ref["reward_fraction"])
    return section


def _ablation_section(ablation: dict[str, dict[str, Any]], device: str, not_run: list[str]) -> dict[str, Any]:
    section = new_section("ablation", "5. Ablation: one optimisation at a time")
    rows, first, prev = [], None, None
    for name, r in ablation.items():
        first = first or r["step_s"]
        rows.append(
            [
                name,
                r["step_s"] * 1e3,
                first / r["step_s"],
                (prev or r["step_s"]) / r["step_s"],
                r["completions_per_s"],
                _tokens_per_s(r),
                r["peak_mb"],
            ]
        )
        prev = r["step_s"]
    section["notes"] += not_run
    if device != "cuda":
        section["notes"].append(
            "GPU rows (TF32, bf16 autocast, torch.compile, CUDA graphs of the decode step) are not measured "
            "here: no CUDA device; the same command fills them on one."
        )
    add_table(
        section,
        f"SFT-warm policy, reference configuration on {device}",
        [
            "configuration",
            "step ms",
            "speed-up vs baseline",
            "vs previous row",
            "completions/s",
            "completion tokens/s",
            "peak MiB",
        ],  # fmt: skip
        rows,
    )
    serial, streamed = ablation.get("+ shared prefill"), ablation.get("+ streamed pool scoring")
    if serial and streamed:
        section["notes"].append(
            f"Streamed pool scoring vs inline scoring: {serial['step_s'] / streamed['step_s']:.2f}x "
            f"(inline scoring of a step's {serial['completions']:.0f} completions takes "
            f"{serial['reward_critical_s'] * 1e3:.1f} ms on the critical path; the pool "
            f"{streamed['reward_critical_s'] * 1e3:.1f} ms)."
        )
    method = next(iter(ablation.values()))["method"]
    section["notes"] += [
        f"Peak memory: {method}; the reward workers' own memory is not included.",
        "Fused AdamW is on in every row: the trainer's non-finite guard relies on it.",
        "Rows before the trimmed log-prob pass run it untrimmed: lm-head and log-softmax over every "
        "position, the entropy metric under autograd and for the reference model too.",
    ]
    section["data"] = {"rows": ablation}
    return section
