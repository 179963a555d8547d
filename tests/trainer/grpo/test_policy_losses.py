"""The policy-loss registry: every name is reachable from config, parameters belong to their losses,
each registered loss is the maths the flags gave before, and the update calls what config names."""

import ast
import inspect
import itertools
import math
from typing import get_args

import pytest
import torch
from pydantic import ValidationError

import trainer.grpo.update as update_module
from service.config_keys import describe_error
from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, char_match, small_cfg
from trainer.config import DEFAULT_TIS_CAP, POLICY_LOSS_PARAMS, GRPOConfig, PolicyLoss, TrainerConfig
from trainer.engine import Trainer
from trainer.grpo import POLICY_LOSSES, PolicyLossInputs, get_policy_loss, register_policy_loss
from trainer.grpo.loss import policy_loss_terms
from trainer.grpo.policy_losses import vanilla
from trainer.grpo.reward_source import InlineRewards

PARAMS = {"dual_clip": 1.5, "tis_cap": 1.2}
# (ratio_level, dual_clip, tis_cap): every combination the older keys allowed
OLDER = list(itertools.product(["token", "sequence"], [None, 1.5], [None, 1.2]))


def _config_error(data: dict) -> str:
    with pytest.raises(ValidationError) as caught:
        TrainerConfig.model_validate({"grpo": data})
    assert len(caught.value.errors()) == 1
    return describe_error(TrainerConfig, caught.value.errors()[0])


@pytest.mark.parametrize("name", get_args(PolicyLoss))
def test_every_registered_name_is_reachable_from_config(name):
    assert set(POLICY_LOSSES) == set(get_args(PolicyLoss))
    cfg = TrainerConfig.model_validate(
        {"grpo": {"policy_loss": name, **{k: PARAMS[k] for k in POLICY_LOSS_PARAMS[name]}}}
    ).grpo
    assert cfg.policy_loss == name and get_policy_loss(cfg.policy_loss) is POLICY_LOSSES[name]


def test_an_unknown_name_is_one_line():
    message = _config_error({"policy_loss": "ppo"})
    assert message.startswith("grpo.policy_loss: 'ppo' is not allowed; expected one of 'vanilla'")
    assert "\n" not in message and "'gspo+dual_clip+tis'" in message
    with pytest.raises(ValueError, match=r"unknown policy loss 'ppo'; registered: vanilla, "):
        get_policy_loss("ppo")


@pytest.mark.parametrize(
    ("grpo", "expected"),
    [
        (
            {"policy_loss": "vanilla", "dual_clip": 3.0},
            "grpo: dual_clip is read only by policy_loss dual_clip,",
        ),
        (
            {"policy_loss": "gspo+dual_clip", "dual_clip": 2.0, "tis_cap": 2.0},
            "grpo: tis_cap is read only by policy_loss tis,",
        ),
        ({"policy_loss": "dual_clip"}, "grpo: policy_loss='dual_clip' needs dual_clip"),
        ({"policy_loss": "gspo", "ratio_level": "sequence"}, "grpo: ratio_level is replaced by policy_loss"),
        ({"ratio_level": "row"}, "grpo: ratio_level 'row' is not allowed; expected 'token' or 'sequence'"),
    ],
)
def test_a_parameter_belongs_to_its_losses(grpo, expected):
    message = _config_error(grpo)
    assert message.startswith(expected) and "\n" not in message


@pytest.mark.parametrize(("level", "dual", "cap"), OLDER)
def test_older_keys_name_the_same_loss(level, dual, cap):
    cfg = GRPOConfig(ratio_level=level, dual_clip=dual, tis_cap=cap)
    parts = (
        ["gspo"] * (level == "sequence") + ["dual_clip"] * (dual is not None) + ["tis"] * (cap is not None)
    )
    assert cfg.policy_loss == ("+".join(parts) or "vanilla")
    assert GRPOConfig.model_validate(cfg.model_dump()) == cfg  # a saved config loads back as itself


def _batch(with_ref: bool):
    g = torch.Generator().manual_seed(5)
    n, length = 6, 5
    old = -torch.rand(n, length, generator=g, dtype=torch.float64) * 2 - 0.1
    logp = old + 0.5 * torch.randn(n, length, generator=g, dtype=torch.float64)
    mask = torch.arange(length).unsqueeze(0) < torch.randint(1, length + 1, (n,), generator=g).unsqueeze(1)
    logp = torch.where(mask, logp, -math.inf).requires_grad_(True)  # padding may hold anything
    sampler = old + 0.4 * torch.randn(n, length, generator=g, dtype=torch.float64)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    ref = old + 0.2 * torch.randn(n, length, generator=g, dtype=torch.float64) if with_ref else None
    return logp, old, sampler, adv, mask, ref


@pytest.mark.parametrize("with_ref", [True, False])
@pytest.mark.parametrize(("level", "dual", "cap"), OLDER)
def test_each_loss_is_the_maths_its_older_flags_gave(level, dual, cap, with_ref):
    cfg = GRPOConfig(ratio_level=level, dual_clip=dual, tis_cap=cap, beta=0.1, kl_estimator="k2")
    logp, old, sampler, adv, mask, ref = _batch(with_ref)
    # the update's call before the registry, verbatim
    is_weights = torch.clamp(torch.exp(old - sampler), max=cap) if cap is not None else None
    before = policy_loss_terms(
        logp, old, adv, mask, cfg.clip_low, cfg.clip_high, ref, cfg.beta if ref is not None else 0.0,
        ratio_level=level, dual_clip=dual, kl_estimator=cfg.kl_estimator, is_weights=is_weights,
    )  # fmt: skip
    now = get_policy_loss(cfg.policy_loss)(PolicyLossInputs(logp, old, sampler, adv, mask, ref), cfg)
    for a, b in zip(before[:4], now[:4], strict=True):  # loss, pg, kl, clipped
        assert torch.equal(a, b)
    if cap is None:
        assert now.is_weights is None and now.is_clipped is None
    else:
        assert torch.equal(now.is_weights, is_weights)
        assert torch.equal(now.is_clipped, mask & (torch.exp(old - sampler) > cap))
    grad_before = torch.autograd.grad(before.loss.sum(), logp)[0]
    assert torch.equal(grad_before, torch.autograd.grad(now.loss.sum(), logp)[0])
    assert torch.isfinite(grad_before).all()


@pytest.mark.parametrize("name", [n for n in get_args(PolicyLoss) if "tis" in n.split("+")])
def test_a_tis_loss_without_a_cap_takes_cap_2(name):
    cfg = TrainerConfig.model_validate(
        {"grpo": {"policy_loss": name, "dual_clip": 3.0} if "dual" in name else {"policy_loss": name}}
    )
    assert cfg.grpo.tis_cap == DEFAULT_TIS_CAP == 2.0
    assert GRPOConfig.model_validate(cfg.grpo.model_dump()) == cfg.grpo  # saved with its cap


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="policy loss 'vanilla' is already registered"):
        register_policy_loss("vanilla")(vanilla)


@pytest.fixture
def spy_loss():
    """A loss registered through the decorator that records its calls and takes no gradient step."""
    calls = []

    @register_policy_loss("test_spy")
    def spy(inputs: PolicyLossInputs, cfg: GRPOConfig):
        calls.append(inputs)
        terms = vanilla(inputs, cfg)
        return terms._replace(loss=terms.loss * 0, pg=terms.pg * 0)

    yield calls
    del POLICY_LOSSES["test_spy"]


def test_the_update_calls_the_loss_config_names(spy_loss):
    cfg = small_cfg(beta=0.0)
    # "test_spy" is not a config name: model_copy hands it over unvalidated, as a plugin would be
    cfg = cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"policy_loss": "test_spy"})})
    trainer = Trainer(cfg, CHESS_TOKENIZER)
    m = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert m["empty_update"] == 0 and spy_loss
    assert all(isinstance(x, PolicyLossInputs) and x.sampler_logprobs.shape == x.mask.shape for x in spy_loss)
    assert m["loss"] == 0.0 and m["grad_norm"] == 0.0  # the update's loss is the spy's


def test_the_update_never_reads_a_variant_flag():
    tree = ast.parse(inspect.getsource(update_module))
    read = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute)]
    assert not {"dual_clip", "tis_cap", "ratio_level", "kl_estimator"} & {node.attr for node in read}
    names = [ast.unparse(node) for node in read if node.attr == "policy_loss"]
    assert names.count("cfg.policy_loss") == 1  # the lookup at construction, and nothing else
