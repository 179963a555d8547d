"""The trainer on CUDA: bf16 autocast, the reference kept on CPU, fp16 with its scaler."""

import math

import pytest
import torch

from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, char_match
from trainer.config import TrainerConfig
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
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
