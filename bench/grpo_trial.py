"""Whole GRPO steps of one configuration, measured in a process of its own (see isolated.py).

A step is timed from the call of `Trainer.grpo_step` to the end of writing its metrics line,
so sampling, scoring, the reference pass, loss, backward, the optimiser and metric logging are
all inside it. Rewards come from the default scorer, either inline (scored inside `submit`,
serially after each micro-batch is sampled) or through a `RewardPool` connected to the Ray
cluster the parent started (scoring overlaps the rest of the step).

    sft_warm_start(trainer_cfg, out_path, ...)   # the policy the service would start GRPO from
    run_trial(trainer_cfg, rewards="pool", ...)  # medians of the step's phases and its peak memory
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

import ray
import torch

from actors.pool.config import PoolConfig
from actors.pool.placement import PROBE, PlacedRewards
from actors.pool.reward_pool import RewardPool
from actors.run.heap import frozen_heap
from actors.run.threads import choose_sampling_threads
from bench.inline_scoring import scorer_rewards
from bench.isolated import PeakMemory
from bench.timing import median
from rewards import FenScorer, RewardConfig
from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards, Rewards
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.sampling.logprobs import token_entropy, token_logprobs
from trainer.sampling.rollout import Rollout

CHESS_TOKENIZER = CharTokenizer(CHESS_ALPHABET)

GRPO_DATA_SEED = 11  # GRPO prompts come from a stream apart from the SFT pairs
MIN_PLIES, MAX_PLIES = 1, 4  # the reference work's openings (the fen task's default plies, as the peer's)


def legacy_completion_logprobs(
    model, rollout: Rollout, temperature: float, *, entropy: bool = True, shared_prefix: bool = False
):
    """The untrimmed log-prob pass (the ablation's rows before the trimmed one):
    the lm-head and log-softmax over every position, the entropy under autograd, and computed for
    the reference pass too; every row's prompt run in full (`shared_prefix` is not taken)."""
    p = rollout.prompt_len
    logits = model(rollout.input_ids[:, :-1], rollout.position_ids[:, :-1], rollout.attn_mask[:, :-1])
    logits = logits[:, p - 1 :].float() / temperature
    keep = rollout.completion_mask
    logp = token_logprobs(logits, rollout.input_ids[:, p:]).masked_fill(~keep, 0.0)
    return logp, token_entropy(logits).masked_fill(~keep, 0.0)


def use_legacy_logprobs() -> None:
    """Swap the trimmed log-prob pass for the legacy one in this process (trial processes only)."""
    import trainer.engine
    import trainer.grpo.update

    trainer.engine.completion_logprobs = legacy_completion_logprobs
    trainer.grpo.update.completion_logprobs = legacy_completion_logprobs


class TimedRewards:
    """A `RewardSource` wrapper that times `submit` and `collect`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reset()

    def reset(self) -> None:
        self.submit_s = self.collect_s = 0.0

    def submit(self, completions: list[str], targets: list[str], *, fields: list[Any] | None = None) -> Any:
        began = time.perf_counter()
        ticket = self.inner.submit(completions, targets, fields=fields)
        self.submit_s += time.perf_counter() - began
        return ticket

    def collect(self, tickets: list[Any], timeout_s: float | None = None) -> Rewards:
        began = time.perf_counter()
        out = self.inner.collect(tickets, timeout_s)
        self.collect_s += time.perf_counter() - began
        return out


class RolloutLog:
    """The rollouts the trainer sampled in a step, read after the step (no device sync inside it):
    each micro-batch's shape and each completion's token count and whether it ended in EOS."""

    def __init__(self, trainer: Trainer) -> None:
        self.eos_id = trainer.tokenizer.eos_id
        self.rollouts: list[Rollout] = []
        sample = trainer.rollouts.sample

        def observed(pairs: Sequence[Any], rewards: Any, **kwargs: Any) -> tuple[list[Rollout], list[Any]]:
            rollouts, tickets = sample(pairs, rewards, **kwargs)
            self.rollouts += rollouts
            return rollouts, tickets

        # an instance attribute: grpo_step's rollouts.sample finds it first
        trainer.rollouts.sample = observed

    def clear(self) -> None:
        self.rollouts = []

    @property
    def shapes(self) -> list[tuple[int, int, int, int]]:
        """(rows N, prompts B, prompt length P, completion length L) of each micro-batch."""
        return [
            (r.num_rows, r.num_rows // r.group_size, r.prompt_len, r.completion_mask.shape[1])
            for r in self.rollouts
        ]

    @property
    def tokens(self) -> list[int]:
        """Sampled tokens of each completion, EOS included."""
        return [n for r in self.rollouts for n in r.completion_mask.sum(1).tolist()]

    @property
    def ended(self) -> list[bool]:
        """Whether each completion ended in EOS (else it ran to max_new_tokens)."""
        return [e for r in self.rollouts for e in (r.completion_ids == self.eos_id).any(1).tolist()]


def step_flops(trainer: Trainer, shapes: list[tuple[int, int, int, int]], cached: bool) -> float:
    """Matmul + attention FLOPs of one step from its micro-batch shapes (the PaLM/nanoGPT count).

    Update: forward + backward over [N, P+L] per pass; reference: one forward; with the policy's
    `shared_prefix` both run each group's P prompt columns once ([B, P] + [N, L]). Sampling with
    the cache: a forward of each prompt once per prompt and of each new token once; without it, a
    forward over the whole sequence so far at every new token.
    """
    cfg = trainer.cfg
    shared = trainer.policy.shared_prefix

    def fwd_per_token(seq_len: float) -> float:
        return trainer.model.estimate_flops_per_token(seq_len) / 3  # forward = a third of forward + backward

    total = 0.0
    for n, b, p, length in shapes:
        t = p + length
        scored = b * p + n * length if shared and n > b else n * t  # token columns through the blocks
        total += cfg.grpo.passes * 3 * fwd_per_token(t) * scored
        total += (cfg.grpo.beta > 0) * fwd_per_token(t) * scored
        if cached:
            total += fwd_per_token(p) * b * p + fwd_per_token(p + length / 2) * n * length
        else:
            total += sum(fwd_per_token(p + j) * n * (p + j) for j in range(length))
    return total


def _open_rewards(
    kind: str, pool_cfg: dict[str, Any] | None, gcs_address: str | None, reward: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """(reward source, pool or None): inline scoring, or a pool on the parent's Ray cluster, of the
    reward `reward` (a RewardConfig's fields; default: the bundled FEN reward).

    With a gcs_address the process joins the cluster either way, as the service's trainer
    process does, so inline and pool trials carry the same Ray threads.
    """
    if kind not in ("inline", "pool", "auto"):
        raise ValueError(f"rewards must be 'inline', 'pool' or 'auto', got {kind!r}")
    if kind != "inline" and not gcs_address:
        raise ValueError(f"rewards={kind!r} needs the gcs_address of a running Ray cluster")
    if gcs_address and not ray.is_initialized():
        ray.init(address=gcs_address, logging_level="ERROR", log_to_driver=False)
    reward_cfg = RewardConfig.model_validate(reward or {})
    if kind == "inline":
        return InlineRewards(scorer_rewards(FenScorer(reward_cfg))), None
    cfg = PoolConfig(**{**(pool_cfg or {}), "name_prefix": f"bench-{uuid.uuid4().hex[:8]}"})
    pool = RewardPool.create(reward_cfg, cfg, run_id="bench")
    if kind == "auto":  # pool.placement=auto, as the service runs it
        return PlacedRewards(pool, FenScorer(reward_cfg), "auto", log=lambda line: None), pool
    return pool, pool


def _step_record(
    metrics: dict[str, float], timed: TimedRewards, log: RolloutLog, wall_s: float
) -> dict[str, float]:
    critical = timed.submit_s + timed.collect_s
    tokens, ended = log.tokens, log.ended
    n = max(1, len(tokens))
    return {
        "step_s": wall_s,
        "sample_s": metrics["sample_s"],
        "sample_only_s": metrics["sample_s"] - timed.submit_s,
        "reward_submit_s": timed.submit_s,
        "reward_wait_s": timed.collect_s,
        "reward_critical_s": critical,
        "reward_fraction": critical / wall_s,
        "ref_s": metrics.get("ref_s", 0.0),
        "update_s": metrics["update_s"],
        "completions": metrics["completions"],
        "completions_per_s": metrics["completions"] / wall_s,
        "reward_mean": metrics["reward_mean"],
        "completion_tokens": sum(tokens) / n,
        "tokens_per_s": sum(tokens) / wall_s,  # completion tokens (EOS included) per second of the step
        "no_eos_frac": 1.0 - sum(ended) / n,
    }


def run_trial(
    trainer_cfg: dict[str, Any],
    rewards: str,
    steps: int,
    warmup: int,
    threads: int,
    device: str = "cpu",
    init_weights: str | None = None,
    pool_cfg: dict[str, Any] | None = None,
    gcs_address: str | None = None,
    legacy_logprobs: bool = False,
    reward: dict[str, Any] | None = None,
    sampling_threads: int | str | None = None,
    fixed_length: bool = False,
) -> dict[str, Any]:
    """`warmup` untimed then `steps` timed GRPO steps; medians of every phase, and peak memory.

    fixed_length: every completion decodes sampling.max_new_tokens tokens, EOS ignored (equal work
    whatever the policy).

    The warm-up steps also compile (with model.compile / sampling.compile), outside the timing;
    with rewards="auto" there are at least as many as placement's probe steps.
    sampling_threads: torch threads while decoding: None leaves `threads`; "rule" (the shipped
    default), "auto" or a count as a trainer worker takes them (`actors.run.threads.choose_sampling_threads`).
    """
    if device == "cpu":
        torch.set_num_threads(threads)
    if rewards == "auto":  # placement's probe steps are not the steady state it settles in
        warmup = max(warmup, len(PROBE))
    if legacy_logprobs:
        use_legacy_logprobs()
    cfg = TrainerConfig.model_validate(trainer_cfg)
    trainer = Trainer(cfg, CHESS_TOKENIZER, device=device)
    trainer.sampler.fixed_length = fixed_length
    if init_weights:
        trainer.model.load_state_dict(torch.load(init_weights, map_location=trainer.device))
    source, pool = _open_rewards(rewards, pool_cfg, gcs_address, reward)
    timed = TimedRewards(source)
    rollouts = RolloutLog(trainer)
    n = cfg.grpo.prompts_per_step
    pairs = generate_pairs(
        (warmup + steps) * n, seed=GRPO_DATA_SEED, min_plies=MIN_PLIES, max_plies=MAX_PLIES
    )
    decode = {}
    if sampling_threads is not None:
        setting = None if sampling_threads == "rule" else sampling_threads
        decode = choose_sampling_threads(trainer, setting, pairs[0].prompt)
    try:
        memory = PeakMemory(trainer.device)
        with frozen_heap():  # as the run's loop steps (`actors.run.heap`)
            records = _timed_steps(trainer, pairs, timed, rollouts, warmup, steps)
        peak = memory.result()
    finally:
        if pool is not None:
            pool.shutdown()
    return {**summarise_steps(records), **peak, "runtime": _runtime(trainer, decode, source)}


def _runtime(trainer: Trainer, decode: dict[str, Any], source: Any) -> dict[str, Any]:
    """What the trial ran with: precision, threads, the wait policy, decoding threads, placement."""
    runtime = {
        "precision": trainer.precision.dtype,
        "torch_threads": torch.get_num_threads(),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        **decode,
    }
    if isinstance(source, PlacedRewards):
        runtime["placement_decisions"] = source.decisions
    return runtime


def _timed_steps(
    trainer: Trainer, pairs: list, timed: TimedRewards, rollouts: RolloutLog, warmup: int, steps: int
) -> list[dict[str, float]]:
    """Run `warmup` then `steps` GRPO steps, each writing its metrics line as a run does; the
    records of the timed ones (phases, wall time, estimated GFLOP)."""
    n, records = trainer.cfg.grpo.prompts_per_step, []
    with tempfile.TemporaryFile("w") as metrics_log:
        for i in range(warmup + steps):
            timed.reset()
            rollouts.clear()
            began = time.perf_counter()
            metrics = trainer.grpo_step(pairs[i * n : (i + 1) * n], timed)
            metrics_log.write(json.dumps({"step": i, "phase": "grpo", **metrics}) + "\n")
            metrics_log.flush()
            wall = time.perf_counter() - began
            if i >= warmup:
                record = _step_record(metrics, timed, rollouts, wall)
                record["gflop"] = (
                    step_flops(trainer, rollouts.shapes, trainer.cfg.sampling.use_kv_cache) / 1e9
                )
                record["gflop_per_s"] = record["gflop"] / wall
                records.append(record)
    return records


def summarise_steps(records: list[dict[str, float]]) -> dict[str, Any]:
    """The median of every per-step figure, and the steps themselves under "steps"."""
    if not records:
        raise ValueError("no timed steps to summarise (steps must be >= 1)")
    return {**{k: median([r[k] for r in records]) for k in records[0]}, "steps": records}


def merge_trials(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of one configuration as one: medians over all their steps, the largest peak."""
    merged = summarise_steps([r for t in trials for r in t["steps"]])
    merged.update(peak_mb=max(t["peak_mb"] for t in trials), method=trials[0]["method"], runs=len(trials))
    merged["runtime"] = trials[0].get("runtime")
    return merged


def sft_warm_start(
    trainer_cfg: dict[str, Any], out_path: str, threads: int, device: str = "cpu"
) -> dict[str, Any]:
    """`sft.steps` SFT steps from the seed's initial weights; saves the policy's state_dict."""
    if device == "cpu":
        torch.set_num_threads(threads)
    cfg = TrainerConfig.model_validate(trainer_cfg)
    if cfg.sft.steps < 1:
        raise ValueError(f"sft_warm_start needs sft.steps >= 1, got {cfg.sft.steps}")
    trainer = Trainer(cfg, CHESS_TOKENIZER, device=device)
    b = cfg.sft.batch_size
    pairs = generate_pairs(cfg.sft.steps * b, seed=cfg.data.seed, min_plies=MIN_PLIES, max_plies=MAX_PLIES)
    began = time.perf_counter()
    losses = [trainer.sft_step(pairs[i * b : (i + 1) * b])["loss"] for i in range(cfg.sft.steps)]
    elapsed = time.perf_counter() - began
    torch.save(trainer.model.state_dict(), out_path)
    return {"steps": cfg.sft.steps, "seconds": elapsed, "first_loss": losses[0], "final_loss": losses[-1]}
