"""Data parallelism: 2 gloo ranks x half the pairs make the same update, and report the same step
figures, as 1 process x all pairs."""

import pytest
import torch

from tests.trainer.ranks import spawn_ranks
from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, Pair
from trainer.engine import Trainer
from trainer.grpo.reward_source import Rewards
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.sampling.sampler import completions_text, generate

CHESS_TOKENIZER = CharTokenizer(CHESS_ALPHABET)

PAIRS = [
    Pair(p, t)
    for p, t in [
        ("e4", "ab"),
        ("d4", "cd"),
        ("c4", "ef"),
        ("Nf3", "gh"),
        ("g3", "a"),
        ("b3", "bc"),
        ("f4", "d"),
        ("a3", "ee"),
    ]
]
CFG = TrainerConfig.model_validate(
    {
        "seed": 2,
        "sampling": {"group_size": 4, "max_new_tokens": 6, "prompts_per_microbatch": 2},
        "grpo": {"beta": 0.05, "scale": "batch", "loss_agg": "sequence", "zero_var_groups": "keep"},
        "optim": {"lr": 1e-2},
        "sft": {"lr": 1e-2, "warmup_steps": 0},
        "precision": {"dtype": "fp32"},  # ranks and one process agree exactly in fp32 only
    }
)


def file_letters(completions, targets):
    """Share of characters that are file letters: varies within most groups of a random policy."""
    return [sum(ch in "abcdefgh" for ch in c) / max(len(c), 1) for c in completions]


def _rollouts(trainer: Trainer):
    """4 micro-batches of 2 prompts from the initial weights, with a fixed generator, and their rewards."""
    gen = torch.Generator().manual_seed(1)
    rollouts, values = [], []
    for i in range(0, len(PAIRS), 2):
        chunk = PAIRS[i : i + 2]
        r = generate(
            trainer.model,
            [trainer.tokenizer.encode_prompt(p.prompt) for p in chunk],
            CFG.sampling,
            trainer.tokenizer,
            gen,
        )
        rollouts.append(r)
        values.append(
            file_letters(
                completions_text(r, trainer.tokenizer),
                [p.target for p in chunk for _ in range(4)],
            )
        )
    return rollouts, values


def _grads(trainer: Trainer) -> dict:
    """The (clipped) gradients of the last optimiser step: what DDP must make equal."""
    return {n: p.grad.clone() for n, p in trainer.model.named_parameters()}


class _OwnAggregate:
    """An episode host's `aggregate_metrics` alone (what the update reads of it): the episodes it
    saw, and the first and last episode's row, which rank order must keep."""

    @staticmethod
    def aggregate_metrics(infos):
        return {"episodes": len(infos), "first": infos[0]["item"], "last": infos[-1]["item"]}


def _run(rank: int, world: int, out: str) -> None:
    trainer = Trainer(CFG, CHESS_TOKENIZER)
    sft = trainer.sft_step(PAIRS)
    sft_grads = _grads(trainer)
    trainer = Trainer(CFG, CHESS_TOKENIZER)  # the GRPO update starts from the same initial weights everywhere
    trainer.sampler.episodes = _OwnAggregate()
    rollouts, values = _rollouts(trainer)
    per = len(rollouts) // world
    mine = slice(rank * per, (rank + 1) * per)  # the same contiguous share as Trainer.local_share
    flat = [v for vs in values[mine] for v in vs]
    statuses = ["ok"] * len(flat)
    if rank == world - 1:
        statuses[-1] = "error"  # the step's last group is unusable: dropped, not in reward_mean
    usable = [s == "ok" for s in statuses]
    scored = Rewards(
        values=flat,
        usable=usable,
        statuses=statuses,
        stats={"reward_items": float(len(flat)), "reward_errors": float(statuses.count("error"))},
        components={"letters": (sum(v for v, u in zip(flat, usable, strict=True) if u), float(sum(usable)))},
        episode_infos=[{"item": mine.start * 8 + i} for i in range(len(flat))],  # 8 items a micro-batch
    )
    grpo = trainer.grpo_update(rollouts[mine], scored)
    if rank == 0:
        torch.save({"sft_grads": sft_grads, "grpo_grads": _grads(trainer), "sft": sft, "grpo": grpo}, out)


@pytest.mark.slow
def test_two_ranks_match_one_process(tmp_path):
    single, double = str(tmp_path / "single.pt"), str(tmp_path / "double.pt")
    _run(0, 1, single)
    spawn_ranks(_run, str(tmp_path / "rdv"), (double,))
    a, b = torch.load(single), torch.load(double)
    assert a["sft"]["loss"] == pytest.approx(b["sft"]["loss"], rel=1e-5)
    assert a["grpo"]["loss"] == pytest.approx(b["grpo"]["loss"], rel=1e-4, abs=1e-6)
    # Gradients, not weights: Adam's first step is lr * sign(g), so summation-order noise in a
    # near-zero gradient would flip that weight's update although the gradients agree.
    for phase in ("sft_grads", "grpo_grads"):
        for name, g in a[phase].items():
            torch.testing.assert_close(b[phase][name], g, rtol=1e-4, atol=1e-7, msg=f"{phase} {name}")
        assert sum(g.abs().sum() for g in a[phase].values()) > 0
    # The record's reward figures describe the whole step on any number of ranks, as the loss does.
    one, two = a["grpo"], b["grpo"]
    assert (one["groups"], one["completions"], one["unusable_groups"], one["scorer_reward_items"]) == (
        8,
        32,
        1,
        32,
    )
    assert 0 < one["reward_mean"] < 1 and one["reward_ok_frac"] == 31 / 32
    for key in STEP_FIGURES:
        assert two[key] == pytest.approx(one[key], rel=1e-6), key
    # an environment's own aggregate sees every rank's episodes, in order
    assert one["env_metrics"] == two["env_metrics"] == {"episodes": 32.0, "first": 0.0, "last": 31.0}


STEP_FIGURES = (
    "reward_mean",
    "groups",
    "completions",
    "unusable_groups",
    "dropped_groups",
    "zero_var_frac",
    "reward_ok_frac",
    "truncated_frac",
    "reward_components",
    "scorer_reward_items",
    "scorer_reward_errors",
)


def _precision_of_each_rank(rank: int, world: int, out_dir: str) -> None:
    """Each rank's bf16 probe gives another figure (rank 0: fast, rank 1: not); both compute in rank 0's choice."""
    import json

    from trainer import precision

    precision.cpu_flags = lambda: frozenset({"avx512_bf16"})
    precision.bf16_speedup_kept = lambda: (4.4 if rank == 0 else 1.1, "measured now")
    trainer = Trainer(TrainerConfig.model_validate({"precision": {"dtype": "auto"}}), CHESS_TOKENIZER)
    record = {"dtype": trainer.precision.dtype, "reason": trainer.precision.reason}
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(record, f)


def test_every_rank_computes_in_rank_0s_resolution_of_auto(tmp_path):
    import json

    spawn_ranks(_precision_of_each_rank, str(tmp_path / "rdv"), (str(tmp_path),))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["dtype"] for r in ranks] == ["bf16", "bf16"]
    assert "measured 4.4x" in ranks[0]["reason"] and ranks[1]["reason"] == "rank 0's " + ranks[0]["reason"]
