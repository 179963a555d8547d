"""The in-process GRPO steps of `service.bench.gpu_steps`, on the CPU with the smoke preset's model."""

import pytest
import torch

from service.bench.gpu_steps import VARIANTS, main, preset_trainer_config, time_variant


def test_the_preset_trainer_config_takes_the_variant_on_top():
    cfg = preset_trainer_config("gpt2-4090", VARIANTS["bf16 + compile + CUDA graphs"])
    assert cfg.model.size == "gpt2" and cfg.precision.dtype == "bf16"
    assert cfg.sampling.compile and cfg.sampling.cuda_graphs and cfg.model.compile
    assert cfg.sampling.group_size == 8  # the preset's own keys stay


def test_steps_are_timed_with_tokens_and_phases():
    r = time_variant("smoke", {}, warmup=0, steps=2, device="cpu")
    assert r["completions"] == 16 and r["step_s"] > 0
    assert r["tokens_per_s"] > r["completions_per_s"] > 0
    assert {"sample_s", "update_s", "reward_wait_s"} <= set(r["phases_s"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_the_command_says_so(capsys):
    assert main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err
