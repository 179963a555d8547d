"""The trainer on CUDA: bf16 autocast, the reference kept on CPU, fp16 with its scaler."""

import math

import pytest
import torch

from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, Pair
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.policy.char_tokenizer import CharTokenizer

CHESS_TOKENIZER = CharTokenizer(CHESS_ALPHABET)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

PAIRS = [Pair(p, t) for p, t in [("e4", "ab"), ("d4", "cd"), ("c4", "ef"), ("Nf3", "gh")]]


def char_match(completions, targets):
    return [
        sum(a == b for a, b in zip(c, t, strict=False)) / len(t)
        for c, t in zip(completions, targets, strict=True)
    ]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_sft_and_grpo_steps_on_cuda(dtype):
    cfg = TrainerConfig.model_validate(
        {
            "sampling": {"group_size": 4, "max_new_tokens": 8, "prompts_per_microbatch": 2},
            "grpo": {"beta": 0.05, "ref_on_cpu": True},
            "precision": {"dtype": dtype},
        }
    )
    trainer = Trainer(cfg, CHESS_TOKENIZER, device="cuda")
    sft = trainer.sft_step(PAIRS)
    grpo = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert math.isfinite(sft["loss"]) and math.isfinite(grpo["loss"])
    assert grpo["skipped"] == 0 and grpo["completions"] == 16
    assert all(p.device.type == "cpu" for p in trainer.ref_model.parameters())  # moved back after use
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    state = trainer.state_dict()
    assert "cuda" in state["rng"]
