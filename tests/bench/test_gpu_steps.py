"""The in-process GRPO steps of `bench.gpu_steps`, on the CPU with the smoke preset's model."""

import pytest
import torch

from bench import cuda_rows
from bench.gpu_steps import VARIANTS, bench_gpu_steps, main, preset_trainer_config, time_variant


def test_the_preset_trainer_config_takes_the_variant_on_top():
    cfg = preset_trainer_config("gpt2-4090", VARIANTS["bf16 + compile + CUDA graphs"])
    assert cfg.model.size == "gpt2" and cfg.precision.dtype == "bf16"
    assert cfg.sampling.compile and cfg.sampling.cuda_graphs and cfg.model.compile
    assert cfg.sampling.group_size == 8  # the preset's own keys stay
    eager = preset_trainer_config("gpt2-4090", VARIANTS["bf16 eager"])
    assert not (eager.model.compile or eager.sampling.compile or eager.sampling.cuda_graphs)


def test_steps_are_timed_with_tokens_and_phases():
    r = time_variant("smoke", {}, warmup=0, steps=2, device="cpu")
    assert r["completions"] == 16 and r["step_s"] > 0
    assert r["tokens_per_s"] > r["completions_per_s"] > 0
    assert {"sample_s", "update_s", "reward_wait_s"} <= set(r["phases_s"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_the_command_says_so(capsys):
    assert main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_section_has_a_row_per_variant_with_its_phases():
    section = bench_gpu_steps("smoke", warmup=0, steps=1, device="cpu", variants=("bf16 eager",))
    (table,) = section["tables"]
    assert table["columns"][:5] == ["variant", "step s", "completions/s", "tokens/s", "peak MiB"]
    assert "sample_s" in table["columns"] and "on cpu" in table["title"]
    assert [row[0] for row in table["rows"]] == ["bf16 eager"] and table["rows"][0][1] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_the_cuda_rows_command_refuses_without_cuda_and_names_unknown_sections(capsys):
    assert cuda_rows.main(["--sections", "train_step"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cuda_rows.main(["--sections", "reward"])  # a section that needs Ray is not among these rows
    assert "unknown sections ['reward']" in capsys.readouterr().err
