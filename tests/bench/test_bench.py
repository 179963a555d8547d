"""The benchmark's structure: plans, the report writer, and one in-process run of every section
at toy sizes (figures are not asserted: they depend on the machine and its load)."""

from __future__ import annotations

import json
import math

import pytest
import ray
import torch

from bench.__main__ import parse_args
from bench.grpo import GRPOPlan, reference_config, with_updates
from bench.grpo_trial import merge_trials, step_flops, summarise_steps
from bench.hf import HFPlan
from bench.plan import BenchPlan, quick_plan
from bench.results import (
    HEADLINE_TARGETS,
    add_table,
    collect_headline,
    fmt,
    new_section,
    render_markdown,
    set_headline,
    write_results,
)
from bench.reward import RewardPlan
from bench.reward_cost import RewardCostPlan
from bench.runner import run_bench
from bench.sampling import SamplingPlan
from bench.sandbox import SandboxPlan
from bench.timing import interleaved_times
from bench.train_step import TrainStepPlan, peak_bf16_flops
from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.engine import Trainer
from trainer.policy.char_tokenizer import CharTokenizer

CHESS_TOKENIZER = CharTokenizer(CHESS_ALPHABET)

HEADLINE_KEYS = {
    "kv_cache_speedup",
    "pool2_vs_inprocess",
    "reward_wait_fraction",
    "grpo_completions_per_s",
    "grpo_completions_per_s_default",
    "step_roofline_fraction",
    "peer_completions_per_s",
    "bf16_vs_fp32_speedup",
    "mfu",
    "hf_completions_per_s",
    "hf_vs_builtin",
    "hf_vs_peer",
    "pool2_vs_inprocess_1ms",
    "reward_wait_fraction_io20ms",
    "inline_reward_fraction_io20ms",
    "auto_vs_best",
    "sandbox_execs_per_s",
    "sandbox_vs_bwrap_per_exec",
    "sandbox_vs_plain",
    "cost_exponent_tokens",
    "peer_tokens_per_s",
    "grpo_tokens_per_s",
    "tokens_vs_peer",
    "tokens_vs_peer_default",
    "hf_tokens_vs_peer",
    "env_wait_fraction",
}


def test_headline_keys_are_the_contract():
    assert set(HEADLINE_TARGETS) == HEADLINE_KEYS


def test_null_headline_needs_a_reason():
    section = new_section("x", "X", owns=("mfu",))
    with pytest.raises(ValueError, match="needs a reason"):
        set_headline(section, "mfu", None)
    with pytest.raises(ValueError, match="unknown headline key"):
        set_headline(section, "speed", 1.0)
    set_headline(section, "mfu", None, "no CUDA device")
    headline, notes = collect_headline([section])
    assert list(headline) == list(HEADLINE_TARGETS)
    assert headline["mfu"] is None and notes["mfu"] == "no CUDA device"
    assert notes["kv_cache_speedup"] == "not measured in this run"


def test_failed_section_nulls_its_keys_with_the_error():
    section = new_section("sampling", "2. Sampling", owns=("kv_cache_speedup",))
    section["status"], section["error"] = "error", "RuntimeError: boom"
    headline, notes = collect_headline([section])
    assert headline["kv_cache_speedup"] is None
    assert "boom" in notes["kv_cache_speedup"]


def test_table_rows_must_match_columns():
    section = new_section("x", "X")
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        add_table(section, "t", ["a", "b", "c"], [[1, 2]])


def test_fmt_cells():
    assert fmt(None) == "n/a"
    assert fmt(12345.6) == "12,346"
    assert fmt(4.567) == "4.57"
    assert fmt(0.01234) == "0.0123"
    assert fmt("fp32") == "fp32"


def test_interleaved_times_alternate_and_skip_warmup():
    calls = []
    times = interleaved_times(
        {"a": lambda r: calls.append(("a", r)), "b": lambda r: calls.append(("b", r))}, 2, 1
    )
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2}
    with pytest.raises(ValueError, match="repeats"):
        interleaved_times({"a": lambda r: None}, 0, 0)


def test_reference_config_is_the_reference():
    cfg = TrainerConfig.model_validate(reference_config(sft_steps=10))
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head) == (2, 128, 4)
    assert cfg.grpo.prompts_per_step == 8 and cfg.sampling.group_size == 8
    assert cfg.sampling.max_new_tokens == 64 and cfg.sampling.use_kv_cache
    assert cfg.grpo.beta == 0.04 and cfg.grpo.passes == 1
    assert cfg.precision.dtype == "fp32" and not cfg.model.compile
    off = TrainerConfig.model_validate(
        with_updates(cfg.model_dump(mode="json"), {"sampling.use_kv_cache": False})
    )
    assert not off.sampling.use_kv_cache


def test_step_flops_count_the_cache_saving():
    trainer = Trainer(TrainerConfig.model_validate(reference_config(sft_steps=1)), CHESS_TOKENIZER)
    shapes = [(64, 8, 12, 64)]  # N rows, B prompts, P, L
    cached, full = step_flops(trainer, shapes, True), step_flops(trainer, shapes, False)
    assert 15e9 < cached < 30e9  # ~20 GFLOP: update (3 passes' worth) + reference + sampling
    assert full > 5 * cached
    unshared_cfg = with_updates(reference_config(sft_steps=1), {"model.shared_prefix": False})
    unshared = step_flops(Trainer(TrainerConfig.model_validate(unshared_cfg), CHESS_TOKENIZER), shapes, True)
    # the update and the reference run each group's 12 prompt columns once, not in each of its 8 rows
    assert cached < unshared < 1.2 * cached


def test_merge_trials_pools_steps_and_keeps_the_largest_peak():
    a = {**summarise_steps([{"step_s": 1.0}, {"step_s": 3.0}]), "peak_mb": 10.0, "method": "m"}
    b = {**summarise_steps([{"step_s": 2.0}]), "peak_mb": 12.0, "method": "m"}
    merged = merge_trials([a, b])
    assert merged["step_s"] == 2.0 and merged["peak_mb"] == 12.0 and merged["runs"] == 2
    with pytest.raises(ValueError, match="no timed steps"):
        summarise_steps([])


def test_peak_table():
    assert peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_bf16_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_bf16_flops("NVIDIA GeForce RTX 4090") == pytest.approx(165.2e12)
    assert peak_bf16_flops("Tesla T4") is None


def test_plan_rejects_unknown_sections():
    with pytest.raises(ValueError, match="sections"):
        BenchPlan(
            "quick", RewardPlan(), SamplingPlan(), TrainStepPlan(), GRPOPlan(), sections=("reward", "gpu")
        )


def test_cli_needs_out():
    with pytest.raises(SystemExit):
        parse_args(["--quick"])
    args = parse_args(["--quick", "--out", "x", "--sections", "sampling"])
    assert args.quick and args.sections == ["sampling"]


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def toy_plan() -> BenchPlan:
    """Each section's smallest configuration (the quick plan's shape at toy sizes)."""
    return BenchPlan(
        mode="toy",
        reward=RewardPlan(
            items=256, worker_counts=(1, 2), chunk_sizes=(64,), repeats=1, warmup=1, dispatch_calls=3
        ),
        sampling=SamplingPlan(sizes=("tiny",), max_new_tokens=8, repeats=1, warmup=1),
        train_step=TrainStepPlan(cpu_sizes=("tiny",), cpu_batch=(4, 16), steps=1, warmup=1),
        grpo=GRPOPlan(
            steps=1,
            warmup=0,
            baseline_steps=1,
            sft_steps=2,
            extras=False,
            max_new_tokens=12,
            unshipped_rows=False,
        ),
        hf=HFPlan(steps=1, warmup=0, prompts=2, group_size=2, max_new_tokens=8),
        reward_cost=RewardCostPlan(
            items=64,
            worker_counts=(1, 2),
            repeats=1,
            warmup=0,
            inline_wait_items=8,
            grpo_steps=1,
            grpo_rounds=1,
            grpo_costs=("fen (~0.02 ms CPU)", "io 20 ms (async)"),
            max_new_tokens=12,
            engine_positions=2,
        ),
        sandbox=SandboxPlan(executions=4, slow_executions=2, rounds=1),
    )


@pytest.mark.slow
def test_every_section_runs_and_writes_the_contract(ray_cluster, tmp_path):
    assert quick_plan().sections == toy_plan().sections
    result = run_bench(toy_plan(), "python -m bench --toy")
    json_path, md_path = write_results(result, tmp_path)
    data = json.loads(json_path.read_text())
    assert {"schema", "command", "mode", "machine", "headline", "headline_notes", "sections"} <= set(data)
    machine = data["machine"]
    assert machine["kind"] and {"usable_cores", "memory_gib", "gpu", "versions"} <= set(machine)
    assert {"vendor", "family", "model", "model_name", "flags"} <= set(machine["cpu"])
    assert {"python", "torch", "ray"} <= set(machine["versions"])
    assert [s["status"] for s in data["sections"]] == ["ok"] * 8, [s["error"] for s in data["sections"]]
    assert set(data["headline"]) == HEADLINE_KEYS
    for key, value in data["headline"].items():
        if value is None:
            assert data["headline_notes"][key]
        else:
            assert isinstance(value, float) and math.isfinite(value) and value > 0
    for key in (
        "kv_cache_speedup", "pool2_vs_inprocess", "reward_wait_fraction", "grpo_completions_per_s",
        "hf_completions_per_s", "hf_vs_builtin", "sandbox_execs_per_s", "sandbox_vs_bwrap_per_exec",
        "sandbox_vs_plain",
    ):  # fmt: skip
        assert data["headline"][key] is not None, data["headline_notes"].get(key)
    if not torch.cuda.is_available():
        assert data["headline_notes"]["mfu"] == "no CUDA device"
        assert data["headline_notes"]["bf16_vs_fp32_speedup"] == "no CUDA device"
    for section in data["sections"]:
        assert section["tables"] and all(t["rows"] for t in section["tables"])
    md = md_path.read_text()
    assert md == render_markdown(result)
    for title in (
        "## Headline",
        "1. Reward",
        "2. Sampling",
        "3. Training step",
        "4. A whole GRPO",
        "5. Ablation",
        "6. The transformers policy",
        "8. Reward cost",
        "9. Sandbox",
    ):
        assert title in md


def test_emulated_bf16_is_measured_on_the_smallest_size_only(monkeypatch):
    import bench.train_step as train_step

    sizes, plan = ("tiny", "small"), train_step.TrainStepPlan()
    quick = quick_plan().train_step  # the quick plan leaves emulated bf16 out
    monkeypatch.setattr(train_step, "resolve_dtype", lambda dtype, device: ("fp32", "no native bf16"))
    assert train_step._measured(plan, "cpu", "tiny", sizes, "bf16")
    assert not train_step._measured(quick, "cpu", "tiny", sizes, "bf16")
    assert not train_step._measured(plan, "cpu", "small", sizes, "bf16")
    assert train_step._measured(plan, "cpu", "small", sizes, "fp32") and train_step._measured(
        plan, "cuda", "small", sizes, "bf16"
    )
    monkeypatch.setattr(train_step, "resolve_dtype", lambda dtype, device: ("bf16", "native bf16"))
    assert train_step._measured(plan, "cpu", "small", sizes, "bf16")
    assert train_step._measured(quick, "cpu", "small", sizes, "bf16")


@pytest.mark.slow
def test_the_cost_curve_runs_at_toy_sizes_and_draws_its_figure(ray_cluster, tmp_path):
    import dataclasses

    from bench.cost_curve import FIGURE, CostCurvePlan, exponent

    toy = CostCurvePlan(group_sizes=(2, 4), prompts=(2, 4), max_new_tokens=(8, 16), sizes=("tiny",),
                        workers=(1,), worker_rewards=("io 20 ms (async)",), steps=1, warmup=0)  # fmt: skip
    plan = dataclasses.replace(toy_plan(), sections=("cost-curve",), cost_curve=toy)
    result = run_bench(plan, "python -m bench --sections cost-curve")
    section = result["sections"][0]
    assert section["status"] == "ok", section["error"]
    points = section["data"]["points"]
    assert [p["tokens"] for p in points["max new tokens"]] == [
        8 * 8 * 8,
        8 * 8 * 16,
    ]  # EOS ignored: exact work
    assert [p["tokens"] for p in points["K (completions per prompt)"]] == [8 * 2 * 64, 8 * 4 * 64]
    batch = points["K (completions per prompt)"] + points["prompts per step"]
    fitted = exponent([p["tokens"] for p in batch], [p["step_s"] for p in batch])
    assert result["headline"]["cost_exponent_tokens"] == pytest.approx(fitted)  # toy timings: any value
    _, md_path = write_results(result, tmp_path)
    assert f"]({FIGURE})" in md_path.read_text() and (tmp_path / FIGURE).stat().st_size > 5000


ENV_SECTION_AT_TOY_SIZES = """
import json, ray
ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
from bench.episodes import EnvPlan, bench_env
section = bench_env(EnvPlan(sft_steps=2, steps=1, warmup=0, rounds=1, prompts=4, group_size=2))
ray.shutdown()
print(json.dumps({"status": section["status"], "headline": section["headline"], "rows": section["tables"][0]["rows"]}))
"""


@pytest.mark.slow
def test_the_env_section_runs_at_toy_sizes():
    """In a process of its own, as the benchmark runs: the section's threads and pools end with it
    (run inside a pytest session that had run the unit tier, that session crashed at exit)."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", ENV_SECTION_AT_TOY_SIZES], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    section = json.loads(result.stdout.strip().splitlines()[-1])
    assert section["status"] == "ok" and section["headline"]["env_wait_fraction"] > 0
    envs = ("guess", "guess + 20 ms tool", "guess + 20 ms tool, 16 at once")
    assert {(r[0], r[1]) for r in section["rows"]} == {(e, h) for e in envs for h in ("local", "pool")}
