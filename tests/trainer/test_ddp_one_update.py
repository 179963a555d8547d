"""DDP on CPU: 2 gloo ranks with a global batch B make the same update as 1 worker with B.

The same function runs twice: in this process as a single worker (no torch.distributed), and in 2
spawned gloo ranks, where the trainer wraps DDP itself and each rank takes its half of every step
(as in a Ray Train worker group, whose whole runs at world 2 `tests/service/test_train_fsdp_runs.py`
checks). It makes one SFT step on B pairs and then one GRPO update on P prompts x K completions.
Sampling is seeded per prompt, so rank r's rollouts are exactly rows of the single worker's; only
the arithmetic differs (per-rank sums, then gloo all-reduce).

What is compared, and within what:
- the gradients (gradient clipping is off, so `.grad` after the step is the raw global gradient)
  and the step's loss and gradient norm: equal up to float32 summation order, 1e-5 relative.
  A wrong normaliser (a per-rank mean, a missing world-size factor) changes these.
- the weights after each step: within 1e-2 x lr. Adam's first step moves a weight by about
  lr * g / (|g| + eps), so a gradient at the rounding level (a key bias, whose true gradient is 0)
  can move by a visibly different fraction of lr on each side; measured differences are ~2e-3 x lr.
"""

from __future__ import annotations

import pytest
import torch

from rewards import score_batch
from tests.trainer.ranks import spawn_ranks
from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
from trainer.distributed import rank_and_world, shard
from trainer.engine import Trainer
from trainer.grpo.reward_source import Rewards
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.sampling.sampler import generate

TOKENIZER = CharTokenizer(CHESS_ALPHABET)

pytestmark = pytest.mark.slow

SFT_PAIRS = 8  # B
GRPO_PROMPTS = 4  # P
SFT_LR = 1e-3
GRPO_LR = 1e-3
CONFIG = {
    "seed": 5,
    "model": {"size": "custom", "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 96},
    "sampling": {"group_size": 4, "max_new_tokens": 24, "temperature": 1.0},
    "sft": {"steps": 1, "batch_size": SFT_PAIRS, "lr": SFT_LR, "warmup_steps": 0},
    "grpo": {"steps": 1, "prompts_per_step": GRPO_PROMPTS, "beta": 0.04},
    "optim": {"lr": GRPO_LR, "warmup_steps": 0, "grad_clip": None},
    "precision": {"dtype": "fp32"},  # compared within 1e-5: fp32 whatever the CPU (auto is bf16 with AMX)
}


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}


def _grads(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {
        k: p.grad.detach().cpu().clone() for k, p in trainer.model.named_parameters() if p.grad is not None
    }


def one_sft_and_one_grpo_update(out_path: str) -> None:
    """The shared experiment; every rank calls it, rank 0 saves weights before, after SFT and after GRPO."""
    cfg = TrainerConfig.model_validate(CONFIG)
    trainer = Trainer(cfg, TOKENIZER, device="cpu")
    rank, world = rank_and_world()
    snapshots = {"init": _weights(trainer)}
    pairs = generate_pairs(SFT_PAIRS + GRPO_PROMPTS, seed=11, min_plies=1, max_plies=3)
    sft = trainer.sft_step(pairs[:SFT_PAIRS])  # the trainer takes this rank's half itself
    snapshots.update(
        sft=_weights(trainer),
        sft_grad=_grads(trainer),
        sft_stats=torch.tensor([sft["loss"], sft["grad_norm"]]),
    )

    snapshots["sampled"] = _sampled_by_the_service_path(trainer, pairs[SFT_PAIRS:], rank, world)

    rollouts, completions, targets = [], [], []
    for index in shard(list(range(GRPO_PROMPTS)), rank, world):
        pair = pairs[SFT_PAIRS + index]
        generator = torch.Generator().manual_seed(1000 + index)  # per prompt: the same rows on any rank
        rollout = generate(
            trainer.model,
            [TOKENIZER.encode_prompt(pair.prompt)],
            cfg.sampling,
            TOKENIZER,
            generator=generator,
        )
        rollouts.append(rollout)
        completions += [TOKENIZER.decode(row, stop_at_eos=True) for row in rollout.completion_ids.tolist()]
        targets += [pair.target] * cfg.sampling.group_size
    results = score_batch(completions, targets)
    scored = Rewards([r.total for r in results], [True] * len(results), [r.status for r in results])
    grpo = trainer.grpo_update(rollouts, scored)
    snapshots.update(
        grpo=_weights(trainer),
        grpo_grad=_grads(trainer),
        grpo_stats=torch.tensor([grpo["loss"], grpo["grad_norm"]]),
    )
    snapshots["empty_update"] = torch.tensor(grpo["empty_update"])
    if rank == 0:
        torch.save(snapshots, out_path)


class _KeptTexts:
    """A RewardSource that only keeps what it is given: the sampled completions, in order."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def submit(self, completions, targets, group_ids=None, *, fields=None):
        self.texts += list(completions)


def _sampled_by_the_service_path(trainer: Trainer, prompts: list, rank: int, world: int) -> list[str]:
    """Every rank's completions of the step's prompts, in prompt order, through `Trainer.rollouts`
    as a GRPO step runs it (each rank its share, at its offset in the step)."""
    mine = shard(prompts, rank, world)
    kept = _KeptTexts()
    trainer.rollouts.sample(mine, kept, first_index=rank * len(mine))
    if world == 1:
        return kept.texts
    gathered: list = [None] * world
    torch.distributed.all_gather_object(gathered, kept.texts)
    return [text for texts in gathered for text in texts]


def _rank(rank: int, world: int, out_path: str) -> None:
    one_sft_and_one_grpo_update(out_path)


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_two_gloo_workers_make_the_single_worker_update(tmp_path):
    single_path, ddp_path = tmp_path / "single.pt", tmp_path / "ddp.pt"
    one_sft_and_one_grpo_update(str(single_path))
    spawn_ranks(_rank, str(tmp_path / "rendezvous"), (str(ddp_path),))
    single, ddp = torch.load(single_path), torch.load(ddp_path)

    assert float(single["empty_update"]) == 0.0, "the GRPO batch must have groups with reward variance"
    assert _max_diff(single["init"], ddp["init"]) == 0.0  # same seed, same start
    # The service's sampling path: each row's noise is keyed by its prompt's index in the step, so
    # two ranks sampling half the prompts each (in micro-batches of half the size) give the same
    # tokens as one worker sampling them all.
    same = sum(a == b for a, b in zip(single["sampled"], ddp["sampled"], strict=True))
    print(f"sampled rows identical between 1 and 2 workers: {same} of {len(single['sampled'])}")
    assert len(single["sampled"]) == GRPO_PROMPTS * CONFIG["sampling"]["group_size"]
    assert same >= 0.99 * len(single["sampled"])
    for phase, lr in (("sft", SFT_LR), ("grpo", GRPO_LR)):
        grad_scale = max(float(g.abs().max()) for g in single[f"{phase}_grad"].values())
        grad_diff = _max_diff(single[f"{phase}_grad"], ddp[f"{phase}_grad"])
        moved = _max_diff(single[phase], single["init" if phase == "sft" else "sft"])
        weight_diff = _max_diff(single[phase], ddp[phase])
        print(
            f"{phase}: gradient max {grad_scale:.2e}, 1-vs-2-worker gradient difference {grad_diff:.2e}; "
            f"weights moved up to {moved:.2e}, differ by {weight_diff:.2e}"
        )
        assert grad_diff <= 1e-5 * grad_scale, f"{phase}: DDP gradient differs by {grad_diff:.2e}"
        assert torch.allclose(single[f"{phase}_stats"], ddp[f"{phase}_stats"], rtol=1e-5), (
            single[f"{phase}_stats"],
            ddp[f"{phase}_stats"],
        )
        assert moved > 0.5 * lr, f"{phase}: the update is too small to compare"
        assert weight_diff <= 1e-2 * lr, f"{phase}: 2 DDP workers differ from 1 worker by {weight_diff:.2e}"


def test_the_gradient_comparison_would_see_a_rank_missing_from_the_sum():
    """Power check: the gradient of half the batch (one rank alone, as if the
    all-reduce were missing) differs from the full batch's far beyond the tolerance above."""
    cfg = TrainerConfig.model_validate(CONFIG)
    pairs = generate_pairs(SFT_PAIRS, seed=11, min_plies=1, max_plies=3)
    full, half = Trainer(cfg, TOKENIZER), Trainer(cfg, TOKENIZER)
    full.sft_step(pairs)
    half.sft_step(pairs[: SFT_PAIRS // 2])
    scale = max(float(g.abs().max()) for g in _grads(full).values())
    assert _max_diff(_grads(full), _grads(half)) > 1e-2 * scale
