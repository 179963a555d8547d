"""The training strategies' pieces that need no process group: optimiser states by name, the
torch check, what fsdp refuses, what it shards, and the per-rank footprint."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, small_cfg
from trainer.engine import Trainer
from trainer.precision import Precision
from trainer.strategy import StrategyConfig, build_strategy, torch_too_old
from trainer.strategy.config import FSDPConfig
from trainer.strategy.ddp import DDPStrategy
from trainer.strategy.footprint import rank_state_bytes
from trainer.strategy.fsdp import resolve_param_dtype
from trainer.strategy.optimizer_state import is_named, to_named, to_numbered
from trainer.strategy.units import UnshardableModelError, shard_units


def _stepped(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}], lr=1e-2)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return model, opt


def test_a_named_optimiser_state_loads_whatever_order_its_names_come_in():
    model, opt = _stepped()
    named = to_named(opt.state_dict(), model, opt)
    assert is_named(named) and not is_named(opt.state_dict())
    assert set(named["state"]) == {n for n, _ in model.named_parameters()}
    for group in named["param_groups"]:  # a writer that lists the names in another order
        random.Random(0).shuffle(group["params"])
    fresh_model, fresh_opt = _stepped(seed=1)
    fresh_model.load_state_dict(model.state_dict())
    DDPStrategy(torch.device("cpu"), 1).load_optimizer_state(fresh_model, fresh_opt, named)
    for (name, p), q in zip(model.named_parameters(), fresh_model.parameters(), strict=True):
        for key, value in opt.state[p].items():
            assert torch.equal(fresh_opt.state[q][key], value), (name, key)


def test_an_optimiser_state_for_other_parameters_is_refused_in_one_line():
    model, opt = _stepped()
    named = to_named(opt.state_dict(), model, opt)
    named["param_groups"][0]["params"][0] = "elsewhere.weight"
    with pytest.raises(ValueError, match="differ in parameters"):
        to_numbered(named, model, opt)


def test_fsdp_needs_a_recent_torch_and_says_which():
    assert torch_too_old("2.13.0+cpu") is None and torch_too_old("2.8.0") is None
    line = torch_too_old("2.5.1+cu121", "cuda")
    assert line is not None and "\n" not in line
    assert (
        "torch >= 2.8" in line and "2.5.1+cu121" in line and "NCCL" in line and "scaling.strategy=ddp" in line
    )


def test_fsdp_alone_is_refused_as_nothing_to_shard():
    precision = Precision(small_cfg().precision, "cpu")
    with pytest.raises(ValueError, match="nothing to shard") as exc:
        build_strategy(StrategyConfig(name="fsdp"), torch.device("cpu"), 1, precision)
    assert "\n" not in str(exc.value)


def test_gathered_weights_are_bf16_on_a_gpu_computing_in_bf16_and_fp32_elsewhere_unless_asked():
    cfg = small_cfg().precision
    fp32 = Precision(cfg, "cpu")
    bf16 = Precision(cfg.model_copy(update={"dtype": "bf16"}), "cpu")
    assert resolve_param_dtype("auto", fp32, torch.device("cpu"))[0] == "fp32"
    assert resolve_param_dtype("auto", bf16, torch.device("cpu"))[0] == "fp32"  # autocast computes in bf16
    assert resolve_param_dtype("bf16", fp32, torch.device("cpu")) == ("bf16", "set in the config")
    assert FSDPConfig().param_dtype == "auto"


def test_the_builtin_gpt_is_sharded_per_block_then_the_whole_model():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    blocks, root = shard_units(trainer.model)
    assert blocks == list(trainer.model.transformer.h) and root is trainer.model


def test_a_model_without_decoder_layers_is_refused():
    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = nn.Linear(2, 2)  # no _no_split_modules: nothing names its layers

    with pytest.raises(UnshardableModelError, match="names none"):
        shard_units(Wrapper())
    with pytest.raises(UnshardableModelError, match="built-in GPT or a transformers model"):
        shard_units(nn.Linear(2, 2))


def test_the_footprint_counts_parameters_gradients_and_the_live_optimiser_once():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    trainer.sft_step(PAIRS)
    params = sum(p.numel() * 4 for p in trainer.model.parameters())  # fp32, the tied matrix once
    counted = rank_state_bytes(trainer.model, [o.optimizer for o in trainer.optimizers.values()])
    assert counted["params"] == counted["grads"] == params
    assert counted["optimizer"] == 2 * params  # AdamW's two moments (its step counts are scalars)
    assert counted["total"] == 4 * params
    trainer.optimizer("grpo")  # GRPO starts with fresh moments: the SFT optimiser's are freed
    assert list(trainer.optimizers) == ["grpo"]
