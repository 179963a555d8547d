"""SFT batches and loss."""

from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F

from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.engine import Trainer
from trainer.model_config import BuiltinModelConfig
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.sft import IGNORE_INDEX, build_sft_batch, sft_loss_sum

TOK = CharTokenizer(CHESS_ALPHABET)


class P(NamedTuple):
    prompt: str
    target: str


def test_batch_is_right_padded_with_loss_on_target_and_eos_only():
    batch = build_sft_batch([P("e4", "ab"), P("e4 e5", "c")], TOK, "cpu", max_len=64)
    # row 0: BOS e 4 SEP a b EOS -> inputs drop the EOS, labels are the next token where in the loss
    row0 = [TOK.bos_id, *TOK.encode("e4"), TOK.sep_id, *TOK.encode("ab")]
    row1 = [TOK.bos_id, *TOK.encode("e4 e5"), TOK.sep_id, *TOK.encode("c")]
    assert batch.input_ids.shape == (2, len(row1))
    assert batch.input_ids[0].tolist() == row0 + [TOK.pad_id] * (len(row1) - len(row0))
    assert batch.input_ids[1].tolist() == row1
    ig = IGNORE_INDEX
    assert batch.labels[0].tolist() == [ig, ig, ig, *TOK.encode("ab"), TOK.eos_id] + [ig] * (
        len(row1) - len(row0)
    )
    assert batch.labels[1].tolist() == [ig] * 6 + [*TOK.encode("c"), TOK.eos_id]
    assert batch.num_tokens == 3 + 2


def test_batch_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        build_sft_batch([], TOK, "cpu", 64)
    with pytest.raises(TypeError, match=r"\.prompt and \.target"):
        build_sft_batch([("e4", "x")], TOK, "cpu", 64)
    with pytest.raises(ValueError, match="block_size=8"):
        build_sft_batch([P("e4 e5 Nf3", "abcdef")], TOK, "cpu", 8)


def test_loss_sum_equals_cross_entropy_on_loss_tokens():
    torch.manual_seed(0)
    model = GPT(BuiltinModelConfig(), TOK.vocab_size)
    batch = build_sft_batch([P("e4", "ab"), P("d4 d5", "c")], TOK, "cpu", max_len=64)
    total = sft_loss_sum(model, batch)
    logits = model(batch.input_ids)
    manual = 0.0
    for b in range(2):
        for t in range(batch.input_ids.shape[1]):
            if batch.labels[b, t] != IGNORE_INDEX:
                manual += F.cross_entropy(logits[b, t : t + 1], batch.labels[b, t : t + 1], reduction="sum")
    torch.testing.assert_close(total, manual)


def test_sft_steps_fit_a_small_set():
    cfg = TrainerConfig.model_validate({"seed": 3, "sft": {"lr": 3e-3, "warmup_steps": 0}})
    trainer = Trainer(cfg, TOK)
    pairs = [P("e4", "8/8 w"), P("d4", "8/8 b"), P("c4", "7k/8 w")]
    losses = [trainer.sft_step(pairs)["loss"] for _ in range(40)]
    assert losses[-1] < 0.2 * losses[0]
    assert trainer.sft_steps == 40
