"""`bench.gpu_memory`: one rank's steps beside the memory plan, run here on the CPU at tiny shapes."""

import dataclasses

import pytest
import torch

from bench import gpu_memory
from service.config import load_config
from service.memory_plan import estimate, tensors
from service.model_shape import model_shape

TINY_QWEN = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 500}  # fmt: skip


def test_the_1p5b_case_trains_a_written_qwen2_model_and_sets_the_plan_beside_it(tmp_path):
    (case,) = [c for c in gpu_memory.cases("cpu") if c.hf_shape]
    assert case.hf_shape["model_type"] == "qwen2" and case.hf_shape["num_hidden_layers"] == 28
    case = dataclasses.replace(
        case, hf_shape={**case.hf_shape, **TINY_QWEN}, overrides=(*case.overrides, "grpo.prompts_per_step=2")
    )
    model_dir = gpu_memory.write_random_hf_model(case.hf_shape, tmp_path, "cpu")
    r = gpu_memory.measure_case(case, model_dir, "cpu", steps=1)
    cfg = load_config(case.preset, overrides=[*case.overrides, f"model.path={model_dir}"])
    shape = model_shape(cfg)
    assert shape.gated_mlp and r["params"] == shape.params
    plan = estimate(cfg, shape, prompt_tokens=r["prompt_tokens"])
    assert r["plan_phases_mib"] == {p.name: tensors(p) / 2**20 for p in plan.phases}
    assert r["grpo_step_s"] > 0 and r["sft_s"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="the skip is for machines without CUDA")
def test_without_cuda_the_section_is_skipped_with_its_reason():
    section = gpu_memory.bench_gpu_memory()
    assert section["status"] == "skipped" and section["error"] == "no CUDA device"
