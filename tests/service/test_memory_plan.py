"""The memory plan: `--plan` prints each trainer worker's estimated peak under ddp and fsdp; a run
whose peak exceeds its devices, fsdp with one worker, a model fsdp cannot shard and FSDP's keys on
a ddp run are refused in one line before anything starts."""

from __future__ import annotations

import dataclasses

import pytest

from service.config import load_config
from service.memory_plan import GIB, estimate
from service.model_shape import model_shape
from service.train import main as train_main
from tests.service.refusals import refused

QWEN_1P5B = "examples/models/qwen2-1.5b-shape"  # Qwen2-1.5B's config.json: its shape, no weights
ON_4X24 = [  # the 1.5B model in full fine-tuning on four 24 GiB cards, rows sized for its vocabulary
    "scaling.num_workers=4", "scaling.device_memory_gib=24", "model.source=hf", f"model.path={QWEN_1P5B}",
    "model.compile=false", "sampling.compile=false", "sampling.cuda_graphs=false",
    "sampling.prompts_per_microbatch=2", "sft.batch_size=16",
]  # fmt: skip


def _plan(capsys, *sets: str) -> str:
    argv = ["--plan", "--preset", "gpt2-4090"]
    for item in sets:
        argv += ["--set", item]
    assert train_main(argv) == 0
    return capsys.readouterr().out


def _peaks(out: str) -> dict[str, float]:
    """{strategy: its peak in GiB} of a printed plan."""
    peaks, strategy = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith(":"):
            strategy = line.split(",")[0].split()[0].rstrip(":")
        elif line.strip().startswith("peak:"):
            peaks[strategy] = float(line.split("=")[0].split()[-2])
    return peaks


def test_the_gpt2_4090_preset_fits_a_24_gib_card_under_either_strategy(capsys):
    out = _plan(capsys, "scaling.device_memory_gib=24")
    print(out)
    assert "85.3M parameters" in out and "2 worker(s)" in out and "computing in bf16" in out
    assert out.count("fits 24.0 GiB") == 2
    peaks = _peaks(out)
    assert set(peaks) == {"ddp", "fsdp"} and peaks["fsdp"] < peaks["ddp"] < 24


def test_a_1p5b_model_fits_four_24_gib_cards_under_fsdp_only(capsys):
    out = _plan(capsys, *ON_4X24, "scaling.strategy=fsdp")
    print(out)
    assert "1,543.7M parameters" in out and "4 worker(s)" in out
    peaks = _peaks(out)
    assert peaks["fsdp"] < 24 < peaks["ddp"]
    assert "fits 24.0 GiB" in out and "does not fit 24.0 GiB" in out


def test_under_fsdp_each_worker_holds_a_quarter_of_the_training_state_at_four_workers():
    cfg = load_config("gpt2-4090", overrides=[*ON_4X24])
    shape = model_shape(cfg)
    ddp, fsdp = (estimate(cfg, shape, name).peak.terms for name in ("ddp", "fsdp"))
    for term in ("weights (fp32)", "gradients", "AdamW moments", "KL reference copy"):
        assert fsdp[term] == pytest.approx(ddp[term] / 4), term
    assert ddp["AdamW moments"] == pytest.approx(shape.params * 8)  # fp32 exp_avg and exp_avg_sq
    assert "DDP gradient buckets" in ddp and "DDP gradient buckets" not in fsdp


def test_lora_trains_and_holds_moments_for_the_adapters_only():
    full = load_config("gpt2-4090", overrides=ON_4X24)
    lora = load_config("gpt2-4090", overrides=[*ON_4X24, "model.lora={r: 8}"])
    a, b = model_shape(full), model_shape(lora)
    assert b.params > a.params and b.trainable < a.params / 50 and not b.reference_copy
    terms = estimate(lora, b).peak.terms
    assert terms["AdamW moments"] == pytest.approx(b.trainable * 8) and "KL reference copy" not in terms


def test_a_run_that_does_not_fit_is_refused_naming_its_estimate_largest_term_and_what_fits(capsys, tmp_path):
    err = refused(capsys, tmp_path, "gpt2-4090", *ON_4X24)
    assert "memory plan: each trainer worker needs about" in err and "scaling.strategy=ddp with 4" in err
    assert "AdamW moments 11.5 GiB the largest term" in err and "more than its 24.0 GiB" in err
    assert "it would fit with scaling.strategy=fsdp (" in err and "model.lora (" in err


def test_fsdp_alone_and_fsdp_keys_under_ddp_are_refused(capsys, tmp_path):
    err = refused(capsys, tmp_path, "smoke", "scaling.strategy=fsdp")
    assert "there is nothing to shard" in err and "scaling.strategy=ddp" in err
    err = refused(capsys, tmp_path, "smoke", "scaling.fsdp.param_dtype=bf16")
    assert "scaling.fsdp is read with scaling.strategy=fsdp only" in err
    err = refused(capsys, tmp_path, "gpt2-4090", "scaling.strategy=fsdp")  # its decode steps are CUDA graphs
    assert "sampling.cuda_graphs" in err


def test_a_model_fsdp_cannot_shard_per_layer_is_refused_before_the_run(capsys, tmp_path, monkeypatch):
    from transformers.models.qwen2 import modeling_qwen2

    # a model class that names no decoder layers (no _no_split_modules): nothing to shard per layer
    monkeypatch.setattr(modeling_qwen2.Qwen2PreTrainedModel, "_no_split_modules", [])
    err = refused(capsys, tmp_path, "gpt2-4090", *ON_4X24, "scaling.strategy=fsdp")
    assert "shards a transformers model per decoder layer" in err and "Qwen2ForCausalLM names none" in err


def test_the_plan_is_in_bytes_of_the_run_shapes():
    cfg = load_config("smoke", overrides=["scaling.num_workers=2", "sft.batch_size=16"])
    shape = model_shape(cfg, vocab=45)
    plan = estimate(cfg, shape, "fsdp")
    assert [p.name for p in plan.phases] == ["sampling", "reference", "update", "sft"]
    assert plan.peak.total < GIB * 1.5 and plan.capacity is not None


def test_the_plans_held_terms_are_the_bytes_a_trainer_holds_after_a_grpo_step():
    """Weights, gradients, AdamW's moments and the KL reference copy: the plan's terms against the
    tensors of a real trainer (one process, fp32) after its SFT and first GRPO steps."""
    from rewards import score_totals
    from service.config import trainer_config
    from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
    from trainer.engine import Trainer
    from trainer.grpo.reward_source import InlineRewards
    from trainer.policy.char_tokenizer import CharTokenizer
    from trainer.strategy.footprint import rank_state_bytes

    cfg = load_config("smoke", overrides=["precision.dtype=fp32", "model.n_layer=2", "model.n_embd=64"])
    tokenizer = CharTokenizer(CHESS_ALPHABET)
    held = estimate(cfg, model_shape(cfg, tokenizer.vocab_size)).held
    trainer = Trainer(trainer_config(cfg), tokenizer)
    pairs = generate_pairs(16, seed=0, min_plies=1, max_plies=4)
    trainer.sft_step(pairs[:8])
    trainer.grpo_step(
        pairs[8 : 8 + cfg.grpo.prompts_per_step],
        InlineRewards(score_totals),
    )
    state = rank_state_bytes(trainer.model, [o.optimizer for o in trainer.optimizers.values()])
    reference = rank_state_bytes(trainer.ref_model)["params"]
    assert list(trainer.optimizers) == ["grpo"]  # the SFT moments were freed when GRPO began
    assert (held["weights (fp32)"], held["gradients"], held["AdamW moments"]) == (
        state["params"],
        state["grads"],
        state["optimizer"],
    )
    assert held["KL reference copy"] == reference


def test_a_gated_mlp_keeps_twice_the_mlp_activations_of_a_plain_one():
    """Qwen2's SwiGLU keeps its gate, its up projection, the gate's activation and their product
    for the backward; GPT-2's MLP its projection and its activation."""
    qwen = load_config("gpt2-4090", overrides=ON_4X24)
    shape = model_shape(qwen)
    assert shape.gated_mlp and not model_shape(load_config("gpt2-4090"), vocab=45).gated_mlp
    plain = estimate(qwen, dataclasses.replace(shape, gated_mlp=False)).phases
    gated = estimate(qwen, shape).phases
    update = {p.name: p.terms["activations"] for p in gated if "activations" in p.terms}
    for phase in plain:
        if "activations" in phase.terms:
            per_layer = 14 * shape.width + 2 * shape.mlp_width
            extra = phase.terms["activations"] * (2 * shape.mlp_width) / per_layer
            assert update[phase.name] == pytest.approx(phase.terms["activations"] + extra), phase.name


def test_the_sft_phase_holds_no_kl_reference_yet():
    """The reference is built as GRPO starts (`Trainer.reference`): SFT's steps do not hold it."""
    cfg = load_config("gpt2-4090", overrides=["scaling.device_memory_gib=24"])
    phases = {p.name: p.terms for p in estimate(cfg, model_shape(cfg, vocab=45)).phases}
    assert "KL reference copy" in phases["update"] and "KL reference copy" not in phases["sft"]
