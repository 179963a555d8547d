"""The update's epochs x shuffled mini-batches against the GRPO objective written out by hand.

A toy policy (a table of next-token logits) over hand-made rollouts of three micro-batches.
For each optimiser step the expected loss is, over the step's mini-batch B (the union over ranks):
  sum_{i in B, t} w_pg[i] * min(pi/pi_old, C) * -min(r A, clip(r) A) / (tokens of B with w_pg)
  + beta * sum_{i in B, t} w_kl[i] * k3 / (tokens of B with w_kl)
with pi_old the policy that sampled (the initial weights) for every epoch, and its gradient is
compared with the one the update stepped with, at the same weights, within 1e-6 relative.
"""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.trainer.ranks import spawn_ranks
from trainer.config import GRPOConfig, OptimConfig, PrecisionConfig
from trainer.grpo.minibatch import minibatch_rows
from trainer.grpo.selection import GroupSelection
from trainer.grpo.update import GRPOUpdate, UpdateContext
from trainer.metrics import DeviceMetrics
from trainer.optim import GuardedOptimizer
from trainer.precision import Precision
from trainer.sampling.rollout import Rollout

V, P, K = 6, 2, 2
CFG = GRPOConfig(
    epochs=2, minibatches=3, beta=0.1, tis_cap=1.2, loss_agg="token", clip_low=0.1, clip_high=0.1
)


class Table(nn.Module):
    """logits = table[token]: a policy whose log-probs are written out by hand below."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(
            torch.randn(V, V, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
        )

    def forward(self, ids, positions, mask, logits_to_keep=0):
        return self.table[ids[:, -logits_to_keep:] if logits_to_keep else ids]


def _rollout(seed: int, groups: int, length: int) -> Rollout:
    g = torch.Generator().manual_seed(seed)
    n = groups * K
    ids = torch.randint(0, V, (n, P + length), generator=g)
    lengths = torch.randint(1, length + 1, (n,), generator=g)
    cmask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    attn = torch.cat([torch.ones(n, P, dtype=torch.bool), cmask], dim=1)
    sampler = torch.where(cmask, -torch.rand(n, length, generator=g, dtype=torch.float64) * 3, 0.0)
    return Rollout(ids, attn, attn.long().cumsum(1) - 1, cmask, sampler, P, K)


def _hand_logprobs(table: torch.Tensor, r: Rollout) -> torch.Tensor:
    logits = table[r.input_ids[:, P - 1 : -1]]  # position P-1+t predicts completion token t
    logp = torch.log_softmax(logits, -1).gather(-1, r.completion_ids.unsqueeze(-1)).squeeze(-1)
    return torch.where(r.completion_mask, logp, 0.0)


def rank_data(rank: int):
    """Rank `rank`'s micro-batches, advantages, weights and reference log-probs."""
    rollouts = [
        _rollout(10 * rank + i, groups, length) for i, (groups, length) in enumerate([(2, 4), (1, 3), (2, 5)])
    ]
    n = sum(r.num_rows for r in rollouts)
    g = torch.Generator().manual_seed(100 + rank)
    adv = torch.randn(n, generator=g)
    row_weight = torch.ones(n)
    row_weight[:K] = 0.0  # a dropped zero-variance group: KL only
    adv[:K] = 0.0
    sel = GroupSelection(adv, row_weight, torch.ones(n), n // K, 0, 1, 1, 0.0)
    table = Table().table.detach()  # references near the policy: inside the k3 clamp
    refs = [
        _hand_logprobs(table, r)
        + 0.3
        * torch.where(
            r.completion_mask, torch.randn(r.completion_mask.shape, generator=g, dtype=torch.float64), 0.0
        )
        for r in rollouts
    ]
    return rollouts, sel, refs


class Recording(GuardedOptimizer):
    """Records each step's weights (before it), gradient and loss."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.records = []

    def step(self, loss):
        self.records.append(
            (self.params[0].detach().clone(), self.params[0].grad.clone(), loss.detach().clone())
        )
        return super().step(loss)


def run_update(rank: int, world: int, model: nn.Module) -> list:
    rollouts, sel, refs = rank_data(rank)
    precision = Precision(PrecisionConfig(), "cpu")
    opt = Recording(model, 0.05, 0, OptimConfig(grad_clip=None), precision)
    inner = model.module if world > 1 else model
    opt.params = [inner.table]
    no_sync = (
        (lambda skip: model.no_sync() if skip else torch.enable_grad())
        if world > 1
        else (lambda skip: torch.enable_grad())
    )
    ctx = UpdateContext(model, precision, no_sync, world, torch.device("cpu"), 1.0, 5, shuffle_seed=7 + rank)
    GRPOUpdate(ctx, CFG, opt, rollouts, sel, refs).run(DeviceMetrics())
    return opt.records


def expected_steps(records: list, world: int) -> list:
    """(loss, gradient) of each optimiser step by the formula, at the weights that step saw."""
    data = [rank_data(r) for r in range(world)]
    table0 = records[0][0]
    gens = [torch.Generator().manual_seed(7 + r) for r in range(world)]
    out = []
    step = 0
    for _ in range(CFG.epochs):
        plans = [
            minibatch_rows(torch.ones(sum(x.num_rows for x in d[0]), dtype=torch.bool), CFG.minibatches, gen)
            for d, gen in zip(data, gens, strict=True)
        ]
        for j in range(CFG.minibatches):
            table = records[step][0].clone().requires_grad_(True)
            pg_sum, kl_sum, pg_tok, kl_tok = 0.0, 0.0, 0, 0
            for (rollouts, sel, refs), plan in zip(data, plans, strict=True):
                logp = torch.cat(
                    [
                        torch.nn.functional.pad(_hand_logprobs(table, r), (0, 5 - r.completion_mask.shape[1]))
                        for r in rollouts
                    ]
                )
                old = torch.cat(
                    [
                        torch.nn.functional.pad(
                            _hand_logprobs(table0, r), (0, 5 - r.completion_mask.shape[1])
                        )
                        for r in rollouts
                    ]
                )
                sampler = torch.cat(
                    [
                        torch.nn.functional.pad(r.old_logprobs, (0, 5 - r.completion_mask.shape[1]))
                        for r in rollouts
                    ]
                )
                ref = torch.cat([torch.nn.functional.pad(x, (0, 5 - x.shape[1])) for x in refs])
                mask = torch.cat(
                    [
                        torch.nn.functional.pad(r.completion_mask, (0, 5 - r.completion_mask.shape[1]))
                        for r in rollouts
                    ]
                )
                rows = plan[j]
                logp, old, sampler, ref, mask = logp[rows], old[rows], sampler[rows], ref[rows], mask[rows]
                a = sel.advantages[rows].double().unsqueeze(1)
                ratio = torch.exp(logp - old)
                pg = -torch.minimum(ratio * a, torch.clamp(ratio, 0.9, 1.1) * a) * torch.clamp(
                    torch.exp(old - sampler), max=CFG.tis_cap or float("inf")
                ) ** (CFG.tis_cap is not None)
                lr = ref - logp
                k3 = torch.exp(lr) - lr - 1
                w_pg = mask & sel.row_weight[rows].bool().unsqueeze(1)
                w_kl = mask & sel.kl_weight[rows].bool().unsqueeze(1)
                pg_sum = pg_sum + (pg * w_pg).sum()
                kl_sum = kl_sum + (k3 * w_kl).sum()
                pg_tok += int(w_pg.sum())
                kl_tok += int(w_kl.sum())
            loss = pg_sum / max(pg_tok, 1) + CFG.beta * kl_sum / max(kl_tok, 1)
            out.append((loss.detach(), torch.autograd.grad(loss, table)[0]))
            step += 1
    return out


def _check(records: list, world: int) -> None:
    expected = expected_steps(records, world)
    assert len(records) == len(expected) == CFG.epochs * CFG.minibatches
    for (_, grad, loss), (e_loss, e_grad) in zip(records, expected, strict=True):
        torch.testing.assert_close(grad, e_grad, rtol=1e-6, atol=1e-12)
        torch.testing.assert_close(loss, e_loss, rtol=1e-6, atol=1e-12)
    moved = [r[0] for r in records]
    assert not torch.equal(moved[0], moved[-1])


def test_epochs_and_minibatches_match_the_formula():
    records = run_update(0, 1, Table())
    _check(records, 1)


def _spawned(rank: int, world: int, out: str) -> None:
    model = nn.parallel.DistributedDataParallel(Table())
    records = run_update(rank, world, model)
    losses = torch.stack([r[2] for r in records])
    dist.all_reduce(losses)  # the step's loss: the sum of the ranks' shares
    if rank == 0:
        torch.save([(w, g, s / world) for (w, g, _), s in zip(records, losses, strict=True)], out)


@pytest.mark.slow
def test_two_gloo_ranks_match_the_formula(tmp_path):
    out = str(tmp_path / "records.pt")
    spawn_ranks(_spawned, str(tmp_path / "rdv"), (out,))
    _check(torch.load(out), 2)


def test_minibatch_rows_deal_the_loss_rows_evenly():
    in_loss = torch.tensor([True, False, True, True, False, True, True, False, False, True])
    plan = minibatch_rows(in_loss, 3, torch.Generator().manual_seed(0))
    assert sorted(torch.cat(plan).tolist()) == list(range(10))
    assert [int(in_loss[p].sum()) for p in plan] == [2, 2, 2]
    assert sorted(len(p) for p in plan) == [3, 3, 4]
    with pytest.raises(ValueError, match="grpo.minibatches"):
        minibatch_rows(in_loss, 11, torch.Generator())
