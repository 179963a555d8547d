"""Autocast paths and their agreement with fp32 on CPU."""

import pytest
import torch

from trainer.config import PrecisionConfig, TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.data.chess_games import Pair as P
from trainer.engine import Trainer
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
    dtype, reason = precision.resolve_dtype("auto", "cpu")
    assert dtype == "fp32" and "no amx_bf16" in reason  # AVX512-BF16 alone: no faster than fp32
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    dtype, reason = precision.resolve_dtype("auto", "cpu")
    assert dtype == "fp32" and "no native bf16" in reason
    assert Precision(PrecisionConfig(), "cpu").autocast_dtype is None
    assert precision.resolve_dtype("bf16", "cpu") == ("bf16", "set in the config")
    assert PrecisionConfig().dtype == "auto"


def test_auto_weighs_the_policys_width_on_amx(monkeypatch):
    from trainer import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"amx_bf16"}))
    narrow = Trainer(TrainerConfig.model_validate({"model": {"size": "tiny"}}), TOK)
    wide = {"size": "custom", "n_layer": 1, "n_head": 4, "n_embd": precision.AMX_MIN_WIDTH}
    assert (narrow.policy.width, narrow.precision.dtype) == (128, "fp32")
    assert Trainer(TrainerConfig.model_validate({"model": wide}), TOK).precision.dtype == "bf16"
