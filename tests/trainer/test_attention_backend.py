"""The trainer keeps cuDNN's attention out of torch's choices on CUDA (a plan per shape: slow in GRPO)."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from tests.trainer.tiny_setup import CHESS_TOKENIZER
from trainer.attention_backend import configure_attention
from trainer.config import SamplingConfig, TrainerConfig
from trainer.data.chess_games import generate_pairs
from trainer.engine import Trainer
from trainer.sampling.sampler import generate


@pytest.fixture
def cudnn_sdp_restored():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


def test_cuda_turns_cudnn_attention_off_and_the_cpu_leaves_it(cudnn_sdp_restored):
    torch.backends.cuda.enable_cudnn_sdp(True)
    configure_attention(torch.device("cpu"))
    assert torch.backends.cuda.cudnn_sdp_enabled()
    configure_attention(torch.device("cuda"))
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_trainer_decodes_without_cudnn_attention(cudnn_sdp_restored):
    trainer = Trainer(
        TrainerConfig.model_validate({"precision": {"dtype": "bf16"}}), CHESS_TOKENIZER, device="cuda"
    )
    prompts = [CHESS_TOKENIZER.encode_prompt(p.prompt) for p in generate_pairs(4, 0, 1, 8)]
    cfg = SamplingConfig(group_size=2, max_new_tokens=6)
    with profile(activities=[ProfilerActivity.CPU]) as prof, trainer.precision.autocast():
        generate(trainer.policy, prompts, cfg, stop_at_eos=False)
    ops = {e.key for e in prof.key_averages()}
    assert "aten::scaled_dot_product_attention" in ops
    assert not any("cudnn_attention" in op for op in ops)
