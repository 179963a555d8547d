"""Autocast paths and their agreement with fp32 on CPU."""

import pytest
import torch

from trainer.config import PrecisionConfig, TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.data.chess_games import Pair as P
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.model_config import BuiltinModelConfig
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.precision import Precision
from trainer.sft import build_sft_batch, sft_loss_sum

TOK = CharTokenizer(CHESS_ALPHABET)


def test_scaler_only_for_fp16_and_autocast_only_when_asked():
    assert Precision(PrecisionConfig(dtype="fp32"), "cpu").scaler is None
    assert Precision(PrecisionConfig(dtype="bf16"), "cpu").scaler is None
    assert Precision(PrecisionConfig(dtype="fp16"), "cpu").scaler is not None
    x = torch.randn(4, 4)
    with Precision(PrecisionConfig(dtype="fp32"), "cpu").autocast():
        assert (x @ x).dtype == torch.float32
    with Precision(PrecisionConfig(dtype="bf16"), "cpu").autocast():
        assert (x @ x).dtype == torch.bfloat16
    with Precision(PrecisionConfig(dtype="fp16"), "cpu").autocast():
        assert (x @ x).dtype == torch.float16


def test_rejects_other_devices():
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        Precision(PrecisionConfig(), "meta")


# bf16 keeps 8 bits of mantissa (relative rounding 2^-9 ~ 0.2%); through 2 layers and a softmax
# the mean cross-entropy of an untrained model (~3.7 nats) moves by well under 1%.
BF16_REL_TOL = 1e-2


def test_bf16_loss_agrees_with_fp32_on_cpu():
    torch.manual_seed(0)
    model = GPT(BuiltinModelConfig(), TOK.vocab_size)
    pairs = [
        P("e4 e5 Nf3", "rnbqkbnr/pppp1ppp/8/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq - 1 2"),
        P("d4", "8/8 w - - 0 1"),
    ]
    batch = build_sft_batch(pairs, TOK, "cpu", 256)
    fp32 = sft_loss_sum(model, batch) / batch.num_tokens
    with Precision(PrecisionConfig(dtype="bf16"), "cpu").autocast():
        bf16 = sft_loss_sum(model, batch) / batch.num_tokens
    assert bf16.dtype == torch.float32  # the loss itself is computed in fp32
    assert abs(bf16.item() - fp32.item()) / fp32.item() < BF16_REL_TOL
    assert bf16.item() != fp32.item()  # autocast really ran in bf16


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_trainer_steps_in_reduced_precision_keep_fp32_master_weights(dtype):
    base = {"seed": 1, "sft": {"warmup_steps": 0}}
    pairs = [P("e4", "8/8 w"), P("d4", "8/8 b")]
    ref = Trainer(TrainerConfig.model_validate(base), TOK)
    low = Trainer(TrainerConfig.model_validate({**base, "precision": {"dtype": dtype}}), TOK)
    m32 = [ref.sft_step(pairs)["loss"] for _ in range(3)]
    mlow = [low.sft_step(pairs)["loss"] for _ in range(3)]
    assert all(p.dtype == torch.float32 for p in low.model.parameters())
    assert mlow == pytest.approx(m32, rel=2e-2)
    assert sum(low.sft_step(pairs)["skipped"] for _ in range(2)) == 0


def test_auto_dtype_follows_the_hardware(monkeypatch):
    from trainer import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16", "amx_bf16"}))
    assert precision.resolve_dtype("auto", "cpu")[0] == "bf16"
    assert Precision(PrecisionConfig(), "cpu").autocast_dtype == torch.bfloat16
    assert precision.resolve_dtype("auto", "cpu", width=precision.AMX_MIN_WIDTH)[0] == "bf16"
    dtype, reason = precision.resolve_dtype("auto", "cpu", width=128)  # casts cost more than the tiles save
    assert dtype == "fp32" and "128 wide" in reason
    assert Precision(PrecisionConfig(), "cpu", width=128).autocast_dtype is None
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    # dot products as wide as fp32's FMAs
    monkeypatch.setattr(precision, "bf16_speedup_kept", lambda: (2.0, "measured now"))
    dtype, reason = precision.resolve_dtype("auto", "cpu", width=128)
    assert dtype == "fp32" and "measured 2.0x" in reason and "under the 2.5x" in reason
    # full-width dot products
    monkeypatch.setattr(precision, "bf16_speedup_kept", lambda: (4.4, "measured now"))
    assert precision.resolve_dtype("auto", "cpu", width=32)[0] == "bf16"  # a property of the core: any width
    dtype, reason = precision.resolve_dtype("auto", "cpu")
    assert dtype == "bf16" and "measured 4.4x" in reason
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    dtype, reason = precision.resolve_dtype("auto", "cpu")
    assert dtype == "fp32" and "no native bf16" in reason
    assert Precision(PrecisionConfig(), "cpu").autocast_dtype is None
    assert precision.resolve_dtype("bf16", "cpu") == ("bf16", "set in the config")
    assert PrecisionConfig().dtype == "auto"


def test_the_bf16_probe_times_this_cpu_once_per_machine(tmp_path, monkeypatch):
    from trainer import precision
    from trainer.machine_figures import ENV, kept_figure

    monkeypatch.setenv(ENV, str(tmp_path / "figures.json"))
    kept_figure.cache_clear()
    threads = torch.get_num_threads()
    try:
        speedup = precision.bf16_matmul_speedup()
        assert speedup > 0 and torch.get_num_threads() == threads  # timed on one thread, the count restored
        kept_figure.cache_clear()  # a later process reads the kept figure instead of timing again
        monkeypatch.setattr(precision, "time_bf16_speedup", lambda: pytest.fail("timed again"))
        assert precision.bf16_matmul_speedup() == speedup
    finally:
        kept_figure.cache_clear()


def test_auto_weighs_the_policys_width_on_amx(monkeypatch):
    from trainer import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"amx_bf16"}))
    narrow = Trainer(TrainerConfig.model_validate({"model": {"size": "tiny"}}), TOK)
    wide = {"size": "custom", "n_layer": 1, "n_head": 4, "n_embd": precision.AMX_MIN_WIDTH}
    assert (narrow.policy.width, narrow.precision.dtype) == (128, "fp32")
    assert Trainer(TrainerConfig.model_validate({"model": wide}), TOK).precision.dtype == "bf16"


def test_decoding_precision_follows_the_run_but_narrow_models_decode_in_fp32_on_a_cpu():
    from trainer.precision import CPU_BF16_DECODE_MIN_WIDTH, resolve_sampling_dtype

    narrow, wide = CPU_BF16_DECODE_MIN_WIDTH // 2, CPU_BF16_DECODE_MIN_WIDTH
    dtype, reason = resolve_sampling_dtype("auto", "bf16", "cpu", narrow)
    assert dtype == "fp32" and f"{narrow} wide" in reason
    assert resolve_sampling_dtype("auto", "bf16", "cpu", wide) == ("bf16", "auto: the run's precision")
    assert resolve_sampling_dtype("auto", "bf16", "cuda", narrow)[0] == "bf16"
    assert resolve_sampling_dtype("auto", "fp32", "cpu", narrow)[0] == "fp32"
    assert resolve_sampling_dtype("bf16", "fp32", "cpu", narrow) == ("bf16", "set in the config")


def test_a_bf16_run_of_a_narrow_model_samples_in_fp32_and_updates_in_bf16():
    cfg = TrainerConfig.model_validate(
        {"precision": {"dtype": "bf16"}, "sampling": {"group_size": 2, "max_new_tokens": 5},
         "grpo": {"prompts_per_step": 2}}
    )  # fmt: skip
    trainer = Trainer(cfg, TOK)
    assert (trainer.precision.dtype, trainer.sampling_precision.dtype) == ("bf16", "fp32")
    assert trainer.sampling_precision.autocast_dtype is None
    alternating = InlineRewards(lambda completions, targets: [float(i % 2) for i in range(len(completions))])
    m = trainer.grpo_step([P("e4", "8/8 w"), P("d4", "8/8 b")], alternating)
    assert 0 < m["sampler_logprob_gap"] < 0.05  # bf16's rounding of the update's forward, no more
    same = Trainer(
        cfg.model_copy(update={"sampling": cfg.sampling.model_copy(update={"dtype": "bf16"})}), TOK
    )
    assert same.sampling_precision is same.precision
