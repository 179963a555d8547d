"""FSDP2 on gloo at world 2 against DDP at world 2: the same records and weights, half the training
state on each rank, the tokens the whole policy decodes, and checkpoints that FSDP at world 2 and
DDP at world 1 resume.

What is compared, and within what (fp32, gradient clipping off, so that the clip coefficient does
not carry the norm's rounding into the weights):
- weights, AdamW's moments and every step record but `grad_norm`: equal. Both strategies compute
  each forward and backward on the same whole weights and average the gradients over the two ranks
  exactly (halving is exact in floating point); only the norm of the sharded gradient sums its parts
  in another order (`grad_norm` within 1e-6 relative).
- a resume under FSDP at world 2: every record of the continuation equal to the run that never
  stopped. Under DDP at world 1: the state it loads equal, the records' figures of the whole step
  within 1e-5 relative (one rank sums every micro-batch's loss where two ranks summed halves), and
  the weights after the continuation within 1e-3 x lr of the run that never stopped (2e-5 x lr
  seen), the attention's key bias within 1e-2 x lr (1.5e-3 x lr seen): softmax ignores a shift
  common to every score, so that bias's gradient is rounding alone, which AdamW's
  g / (|g| + eps) turns into steps of a sizeable share of lr whose size depends on the order of
  the sums. The update's own sums (`kl`, `entropy`, `clip_frac`, `tokens`, `sampler_logprob_gap`)
  are rank 0's rows at world 2, so they are compared between runs of one world size only.
"""

from __future__ import annotations

import pytest
import torch

from tests.trainer.ranks import spawn_ranks
from tests.trainer.tiny_setup import CHESS_TOKENIZER, char_match
from trainer.checkpoint import load_latest, save_checkpoint
from trainer.config import TrainerConfig
from trainer.data.chess_games import Pair
from trainer.distributed import gather_json
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.policy import build_policy
from trainer.precision import Precision
from trainer.sampling.in_process import InProcessSampler
from trainer.sampling.sampler_seam import PromptBatch
from trainer.strategy import StrategyConfig
from trainer.strategy.footprint import rank_state_bytes
from trainer.strategy.optimizer_state import to_named

PAIRS = [
    Pair(p, t)
    for p, t in [
        ("e4", "ab"), ("d4", "cd"), ("c4", "ef"), ("Nf3", "gh"),
        ("g3", "a"), ("b3", "bc"), ("f4", "d"), ("a3", "ee"),
    ]
]  # fmt: skip
CFG = TrainerConfig.model_validate(
    {
        "seed": 2,
        # 4 prompts per rank in micro-batches of 2: every optimiser step accumulates over two
        "sampling": {"group_size": 4, "max_new_tokens": 6, "prompts_per_microbatch": 2},
        "grpo": {"beta": 0.05, "prompts_per_step": 8, "zero_var_groups": "keep"},
        "optim": {"lr": 1e-2, "grad_clip": None},
        "sft": {"lr": 1e-2, "warmup_steps": 0},
        "precision": {"dtype": "fp32"},
    }
)
TIMING = {"sample_s", "ref_s", "reward_wait_s", "update_s", "step_time_s", "completions_per_s"}
RANK_OWN = {"kl", "entropy", "clip_frac", "tokens", "sampler_logprob_gap"}  # rank 0's rows alone
CHECKPOINT_STEP = 3  # after SFT and two GRPO steps


def _grpo(trainer: Trainer, steps: int) -> list[dict]:
    return [trainer.grpo_step(PAIRS, InlineRewards(char_match)) for _ in range(steps)]


def _tokens(sampler, version: int) -> list[list[int]]:
    """The completions of the first four prompts sampled under `version`'s noise (one batch)."""
    done = sampler.sample(PromptBatch.of(PAIRS[:4]), version)
    return done.rollout.input_ids.tolist()


def _plain_sampler(cfg: TrainerConfig, weights: dict) -> InProcessSampler:
    """A whole policy holding `weights`, decoding in this process without any strategy."""
    policy = build_policy(cfg, CHESS_TOKENIZER)
    policy.module.load_state_dict(weights)
    return InProcessSampler(
        policy, cfg.sampling, Precision(cfg.precision, "cpu"), cfg.seed, torch.device("cpu")
    )


def _each_strategy(rank: int, world: int, out: str, checkpoint_dir: str) -> None:
    """SFT and four GRPO steps under ddp, then under fsdp (a checkpoint after the second GRPO step);
    rank 0 saves what the parent compares."""
    kept: dict = {}
    for name in ("ddp", "fsdp"):
        trainer = Trainer(CFG, CHESS_TOKENIZER, strategy=StrategyConfig(name=name))
        first_tokens = _tokens(trainer.sampler, 0)
        records = [trainer.sft_step(PAIRS), *_grpo(trainer, 2)]
        state = trainer.state_dict()  # every rank: collective under fsdp
        if name == "fsdp" and rank == 0:
            save_checkpoint(checkpoint_dir, CHECKPOINT_STEP, state, {"step": CHECKPOINT_STEP})
        records += _grpo(trainer, 2)
        opt = trainer.optimizers["grpo"]
        footprint = rank_state_bytes(trainer.model, [o.optimizer for o in trainer.optimizers.values()])
        state = trainer.state_dict()
        tokens = _tokens(trainer.sampler, 7)  # both ranks decode: the gather is collective
        evaluated = None
        with trainer.decoding():  # as the run loop evaluates: every rank gathers, rank 0 decodes
            if rank == 0:
                evaluated = trainer.evaluator.evaluate(PAIRS, char_match)["reward_mean"]
        footprints = gather_json(footprint, trainer.device)
        if rank == 0:
            optimizer = state["optimizers"]["grpo"]["optimizer"]
            if name == "ddp":
                optimizer = to_named(optimizer, trainer.model, opt.optimizer)
            kept[name] = {
                "records": records,
                "weights": {k: v.clone() for k, v in state["model"].items()},
                "optimizer": optimizer,
                "footprints": footprints,
                "first_tokens": first_tokens,
                "tokens": tokens,
                "plain_tokens": _tokens(_plain_sampler(CFG, state["model"]), 7),
                "evaluated": evaluated,
            }
    if rank == 0:
        torch.save(kept, out)


def _resume(rank: int, world: int, checkpoint_dir: str, out: str) -> None:
    trainer = Trainer(CFG, CHESS_TOKENIZER, strategy=StrategyConfig(name="fsdp"))
    state, _ = load_latest(checkpoint_dir)
    trainer.load_state_dict(state["trainer"])
    loaded = trainer.state_dict()
    records = _grpo(trainer, 2)
    if rank == 0:
        torch.save({"records": records, "loaded": loaded["model"]}, out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two strategies' runs at world 2 and the FSDP resume at world 2 (spawned gloo ranks)."""
    tmp = tmp_path_factory.mktemp("fsdp")
    checkpoints = tmp / "checkpoints"
    spawn_ranks(_each_strategy, str(tmp / "rdv1"), (str(tmp / "each.pt"), str(checkpoints)))
    spawn_ranks(_resume, str(tmp / "rdv2"), (str(checkpoints), str(tmp / "resumed.pt")))
    return torch.load(tmp / "each.pt"), torch.load(tmp / "resumed.pt"), checkpoints


def _figures(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING}


def test_fsdp_makes_the_updates_and_records_of_ddp(runs):
    each, _, _ = runs
    ddp, fsdp = each["ddp"], each["fsdp"]
    assert len(ddp["records"]) == 5
    for a, b in zip(ddp["records"], fsdp["records"], strict=True):
        assert a.keys() == b.keys()  # the same record keys under either strategy
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-6)
        assert {k: v for k, v in _figures(a).items() if k != "grad_norm"} == {
            k: v for k, v in _figures(b).items() if k != "grad_norm"
        }
    assert ddp["weights"].keys() == fsdp["weights"].keys()
    for name, w in ddp["weights"].items():
        assert torch.equal(fsdp["weights"][name], w), name
    a, b = ddp["optimizer"], fsdp["optimizer"]
    assert a["state"].keys() == b["state"].keys() and a["state"]
    for name, moments in a["state"].items():
        for key, value in moments.items():
            assert torch.equal(b["state"][name][key].cpu(), value.cpu()), (name, key)


def test_each_fsdp_rank_holds_half_the_training_state(runs):
    each, _, _ = runs
    ddp, fsdp = each["ddp"]["footprints"], each["fsdp"]["footprints"]
    print("parameter + gradient + optimiser bytes per rank: ddp", ddp, "fsdp", fsdp)
    assert ddp[0] == ddp[1]
    for part in ("params", "grads", "optimizer", "total"):
        # dim 0 of a weight splits into ceil and floor halves: the ranks together hold one copy
        assert fsdp[0][part] + fsdp[1][part] == ddp[0][part], part
        for rank in (0, 1):
            assert fsdp[rank][part] == pytest.approx(ddp[0][part] / 2, rel=0.02), (part, rank)


def test_fsdp_decodes_the_tokens_of_the_whole_policy(runs):
    each, _, _ = runs
    ddp, fsdp = each["ddp"], each["fsdp"]
    assert fsdp["first_tokens"] == ddp["first_tokens"]  # the same start, gathered or not
    assert fsdp["tokens"] == fsdp["plain_tokens"]  # after training: a whole copy of its weights
    assert fsdp["tokens"] == ddp["tokens"]
    assert fsdp["evaluated"] == ddp["evaluated"]  # rank 0 alone decoding inside the gathered context


def test_a_sharded_checkpoint_resumes_under_fsdp_exactly(runs):
    each, resumed, _ = runs
    straight = each["fsdp"]["records"][CHECKPOINT_STEP:]
    assert [_figures(r) for r in resumed["records"]] == [_figures(r) for r in straight]


def test_a_sharded_checkpoint_resumes_under_ddp_at_world_1(runs):
    each, resumed, checkpoints = runs
    state, step = load_latest(checkpoints)
    assert step == CHECKPOINT_STEP
    trainer = Trainer(CFG, CHESS_TOKENIZER)  # one process, ddp: nothing wraps the policy
    trainer.load_state_dict(state["trainer"])
    for name, w in resumed["loaded"].items():  # what FSDP at world 2 loaded, DDP at world 1 loads
        assert torch.equal(trainer.model.state_dict()[name], w), name
    straight = each["fsdp"]["records"][CHECKPOINT_STEP:]
    for a, b in zip(straight, _grpo(trainer, 2), strict=True):
        assert a.keys() == b.keys()
        for key, value in _figures(a).items():
            if key in RANK_OWN:
                continue
            if isinstance(value, float):
                assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
            else:
                assert b[key] == value, key
    lr = CFG.optim.lr
    for name, w in each["fsdp"]["weights"].items():
        diff = (trainer.model.state_dict()[name] - w).abs()
        if name.endswith("attn.c_attn.bias"):  # [query | key | value]: the key third apart
            key = slice(w.numel() // 3, 2 * w.numel() // 3)
            assert float(diff[key].max()) <= 1e-2 * lr, (name, "key", float(diff[key].max()))
            diff[key] = 0
        assert float(diff.max()) <= 1e-3 * lr, (name, float(diff.max()))
