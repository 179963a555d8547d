"""AdamW groups, the LR schedule, and the sync-free non-finite guard."""

import math

import pytest
import torch
from torch import nn

from trainer.config import OptimConfig, PrecisionConfig
from trainer.optim import GuardedOptimizer, NonFiniteStepsError, lr_at, param_groups
from trainer.precision import Precision


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(5, 4)
        self.lin = nn.Linear(4, 5)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, x):
        return self.head(self.norm(self.emb(x))) + self.lin(self.emb(x))


def _loss(model, poison=None):
    out = model(torch.tensor([0, 1, 2, 3]))
    loss = out.pow(2).mean()
    return loss * poison if poison is not None else loss


def _snapshot(opt: GuardedOptimizer):
    params = [p.detach().clone() for p in opt.params]
    state = {id(p): {k: v.clone() for k, v in opt.optimizer.state[p].items()} for p in opt.params}
    return params, state


def _assert_same(opt, snap):
    params, state = snap
    for p, before in zip(opt.params, params, strict=True):
        assert torch.equal(p.detach(), before)
        for k, v in opt.optimizer.state[p].items():
            assert torch.equal(v, state[id(p)][k]), k


def test_weight_decay_only_on_2d_weights_and_tied_once():
    model = Tiny()
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert sum(p is model.emb.weight for p in decay["params"]) == 1


def test_linear_warmup_then_constant():
    assert [lr_at(s, 1.0, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_at(0, 0.3, 0) == 0.3
    with pytest.raises(ValueError):
        lr_at(-1, 1.0, 2)


def test_cosine_and_linear_decay_after_warmup():
    # warm-up 2 of 10 steps, floor 0.1: p = (s - 2) / 8 after it
    expected_cos = [0.5, 1.0] + [
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - 2) / 8)) for s in range(2, 11)
    ]
    expected_lin = [0.5, 1.0] + [0.1 + 0.9 * (1 - (s - 2) / 8) for s in range(2, 11)]
    assert [lr_at(s, 1.0, 2, "cosine", 10, 0.1) for s in range(11)] == pytest.approx(expected_cos, abs=1e-12)
    assert [lr_at(s, 1.0, 2, "linear", 10, 0.1) for s in range(11)] == pytest.approx(expected_lin, abs=1e-12)
    assert lr_at(50, 1.0, 2, "cosine", 10, 0.1) == pytest.approx(0.1)  # past the end: the floor
    assert lr_at(5, 2.0, 2, "constant", 10, 0.1) == 2.0


def test_the_trainer_schedules_each_phase_over_its_own_steps():
    from trainer.config import TrainerConfig
    from trainer.data.chess_games import CHESS_ALPHABET
    from trainer.engine import Trainer
    from trainer.policy.char_tokenizer import CharTokenizer

    cfg = TrainerConfig.model_validate(
        {
            "sft": {"steps": 4, "lr": 1.0, "warmup_steps": 0, "lr_schedule": "linear"},
            "grpo": {"steps": 5, "epochs": 2, "minibatches": 2},
            "optim": {"lr": 1.0, "warmup_steps": 4, "lr_schedule": "cosine", "min_lr_ratio": 0.5},
        }
    )
    trainer = Trainer(cfg, CharTokenizer(CHESS_ALPHABET))
    sft, grpo = trainer.optimizer("sft"), trainer.optimizer("grpo")
    assert sft.lr == 1.0 and grpo.lr == 0.25
    sft.steps, grpo.steps = 3, 19  # the last step of each phase (GRPO: 5 steps x 2 epochs x 2 mini-batches)
    assert sft.lr == pytest.approx(0.25) and grpo.lr == pytest.approx(lr_at(19, 1.0, 4, "cosine", 20, 0.5))
    assert grpo.lr < 0.51


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_nonfinite_step_leaves_weights_and_moments_unchanged(dtype, poison):
    model = Tiny()
    opt = GuardedOptimizer(
        model, 1e-2, 0, OptimConfig(max_consecutive_skips=2), Precision(PrecisionConfig(dtype=dtype), "cpu")
    )
    for _ in range(2):  # real moments first
        opt.zero_grad()
        opt.precision.backward(_loss(model))
        res = opt.step(_loss(model).detach())
        assert res.skipped.item() == 0.0
    snap = _snapshot(opt)
    opt.zero_grad()
    bad = _loss(model, torch.tensor(poison))
    opt.precision.backward(bad)
    res = opt.step(bad.detach())
    assert res.skipped.item() == 1.0 and res.consecutive_skips.item() == 1
    _assert_same(opt, snap)
    opt.check_skips(1)
    with pytest.raises(NonFiniteStepsError, match="max_consecutive_skips=2"):
        opt.check_skips(2)


def test_nonfinite_loss_with_finite_gradients_is_skipped():
    model = Tiny()
    opt = GuardedOptimizer(model, 1e-2, 0, OptimConfig(), Precision(PrecisionConfig(), "cpu"))
    opt.zero_grad()
    _loss(model).backward()
    opt.step(torch.tensor(1.0))
    opt.zero_grad()
    _loss(model).backward()
    snap = _snapshot(opt)
    res = opt.step(torch.tensor(float("nan")))
    assert res.skipped.item() == 1.0
    _assert_same(opt, snap)


def test_consecutive_count_resets_after_a_good_step():
    model = Tiny()
    opt = GuardedOptimizer(model, 1e-2, 0, OptimConfig(grad_clip=None), Precision(PrecisionConfig(), "cpu"))
    seen = []
    for loss_value in (float("nan"), float("nan"), 1.0, float("inf")):
        opt.zero_grad()
        _loss(model).backward()
        seen.append(opt.step(torch.tensor(loss_value)).consecutive_skips.item())
    assert seen == [1, 2, 0, 1]
    assert opt.steps == 4  # the schedule counts attempted steps


def test_clipping_limits_the_update_and_reports_the_unclipped_norm():
    model = Tiny()
    opt = GuardedOptimizer(model, 1e-2, 0, OptimConfig(grad_clip=1e-3), Precision(PrecisionConfig(), "cpu"))
    opt.zero_grad()
    (_loss(model) * 1000).backward()
    norm_before = torch.nn.utils.get_total_norm([p.grad for p in opt.params]).item()
    res = opt.step(torch.tensor(1.0))
    assert res.grad_norm.item() == pytest.approx(norm_before)
    assert torch.nn.utils.get_total_norm([p.grad for p in opt.params]).item() == pytest.approx(1e-3, rel=1e-3)


def test_state_round_trip():
    model = Tiny()
    opt = GuardedOptimizer(model, 1e-2, 3, OptimConfig(), Precision(PrecisionConfig(), "cpu"))
    opt.zero_grad()
    _loss(model).backward()
    opt.step(torch.tensor(float("nan")))
    other = GuardedOptimizer(Tiny(), 1e-2, 3, OptimConfig(), Precision(PrecisionConfig(), "cpu"))
    other.load_state_dict(opt.state_dict())
    assert other.steps == 1 and other.consecutive.item() == 1 and other.lr == opt.lr
