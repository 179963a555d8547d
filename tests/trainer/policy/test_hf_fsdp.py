"""FSDP2 on a `transformers` policy at world 2 (gloo): each decoder layer sharded, then the model;
full fine-tuning and LoRA (the frozen base sharded, the adapters trained) make the updates and
records of DDP at world 2, and decode the tokens of the whole policy.

Compared as in `tests/trainer/test_fsdp.py` (fp32, clipping off), with one more source of rounding:
the shared-prefix forward (`trainer.policy.hf_shared_prefix`) runs each decoder layer twice, and
FSDP reduces a layer's gradient once per run where DDP adds the two runs' parts first (with
model.shared_prefix off the weights come out equal), and AdamW's first step, g / (|g| + eps), scales
that rounding up where a gradient is small. So: the weights within 1e-4 x lr (1.1e-8 x lr seen on
an Intel Xeon, 2.3e-5 x lr on an AMD EPYC: each CPU's kernels sum in their own order) and the
records' figures within 1e-5 relative (2e-7 seen) or 1e-7 absolute (the sampler's log-prob gap is
itself a rounding-level figure).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from tests.trainer.ranks import spawn_ranks  # noqa: E402
from tests.trainer.test_fsdp import PAIRS, TIMING, _grpo, _tokens  # noqa: E402
from trainer.config import TrainerConfig  # noqa: E402
from trainer.engine import Trainer  # noqa: E402
from trainer.policy import build_policy  # noqa: E402
from trainer.policy.hf_tiny import write_tiny_model  # noqa: E402
from trainer.precision import Precision  # noqa: E402
from trainer.sampling.in_process import InProcessSampler  # noqa: E402
from trainer.strategy import StrategyConfig  # noqa: E402

VARIANTS = ("full", "lora")


def _cfg(path: str, variant: str) -> TrainerConfig:
    model = {"source": "hf", "path": path}
    if variant == "lora":
        model["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    return TrainerConfig.model_validate(
        {
            "seed": 2, "model": model,
            "sampling": {"group_size": 4, "max_new_tokens": 6, "prompts_per_microbatch": 2},
            "grpo": {"beta": 0.05, "prompts_per_step": 8, "zero_var_groups": "keep"},
            "optim": {"lr": 1e-2, "grad_clip": None}, "sft": {"lr": 1e-2, "warmup_steps": 0},
            "precision": {"dtype": "fp32"},
        }
    )  # fmt: skip


def _sharding(trainer: Trainer) -> dict:
    """Which weights are sharded, and which the optimiser trains (by name)."""
    from torch.distributed.tensor import DTensor

    trained = {id(p) for g in trainer.optimizer("grpo").optimizer.param_groups for p in g["params"]}
    named = list(trainer.model.named_parameters())
    return {
        "sharded": all(isinstance(p, DTensor) for _, p in named),
        "trained": sorted(n for n, p in named if id(p) in trained),
        "frozen": sorted(n for n, p in named if not p.requires_grad),
    }


def _each(rank: int, world: int, path: str, out: str) -> None:
    kept: dict = {}
    for variant in VARIANTS:
        cfg = _cfg(path, variant)
        for name in ("ddp", "fsdp"):
            trainer = Trainer(cfg, policy=build_policy(cfg), strategy=StrategyConfig(name=name))
            first_tokens = _tokens(trainer.sampler, 0)
            records = [trainer.sft_step(PAIRS), *_grpo(trainer, 2)]
            tokens = _tokens(trainer.sampler, 5)
            sharding = _sharding(trainer)
            state = trainer.state_dict()
            if rank == 0:
                plain = build_policy(cfg)
                plain.module.load_state_dict(state["model"])
                sampler = InProcessSampler(
                    plain, cfg.sampling, Precision(cfg.precision, "cpu"), cfg.seed, torch.device("cpu")
                )
                kept[variant, name] = {
                    "records": records,
                    "weights": {k: v.clone() for k, v in state["model"].items()},
                    "first_tokens": first_tokens,
                    "tokens": tokens,
                    "plain_tokens": _tokens(sampler, 5),
                    "sharding": sharding,
                }
    if rank == 0:
        torch.save(kept, out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf_fsdp")
    path = write_tiny_model(tmp / "llama", "llama", positions=64, width=64)
    spawn_ranks(_each, str(tmp / "rdv"), (str(path), str(tmp / "each.pt")))
    return torch.load(tmp / "each.pt")


@pytest.mark.parametrize("variant", VARIANTS)
def test_fsdp_updates_an_hf_policy_as_ddp_does(runs, variant):
    ddp, fsdp = runs[variant, "ddp"], runs[variant, "fsdp"]
    for a, b in zip(ddp["records"], fsdp["records"], strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if key not in TIMING:
                assert b[key] == (
                    pytest.approx(value, rel=1e-5, abs=1e-7) if isinstance(value, float) else value
                ), key
    lr = _cfg("", variant).optim.lr
    for name, w in fsdp["weights"].items():
        torch.testing.assert_close(w, ddp["weights"][name], rtol=0, atol=1e-4 * lr, msg=name)
    assert fsdp["sharding"]["sharded"] and not ddp["sharding"]["sharded"]
    assert fsdp["sharding"]["trained"] == ddp["sharding"]["trained"]


def test_lora_under_fsdp_trains_the_adapters_of_a_sharded_frozen_base(runs):
    sharding = runs["lora", "fsdp"]["sharding"]
    assert sharding["trained"] and all("lora_" in n for n in sharding["trained"])
    assert sharding["frozen"] and not any("lora_" in n for n in sharding["frozen"])
    full = runs["full", "fsdp"]["sharding"]
    assert not full["frozen"] and len(full["trained"]) > len(sharding["trained"])


@pytest.mark.parametrize("variant", VARIANTS)
def test_an_hf_policy_under_fsdp_decodes_the_tokens_of_the_whole_policy(runs, variant):
    ddp, fsdp = runs[variant, "ddp"], runs[variant, "fsdp"]
    assert fsdp["first_tokens"] == ddp["first_tokens"]
    assert fsdp["tokens"] == fsdp["plain_tokens"] == ddp["tokens"]
