"""The single-process trainer: SFT steps, GRPO steps, evaluation and resumable state.

One object per process. Under torch.distributed it holds the policy through its training strategy
(`trainer.strategy`: `ddp` replicates it, wrapped in DDP above one rank; `fsdp` shards each block of
it over the ranks); each rank takes its contiguous share of a step's pairs (`trainer.distributed.shard`)
and loss normalisers are summed over ranks, so W ranks x B/W pairs make the same update as one
rank x B pairs, under either strategy. Decoding reads whole weights: a step's sampling (and an
evaluation, `decoding`) runs inside the strategy's `decoding()`, which gathers a sharded policy
once and frees it after. It owns its collaborators, each built from what it reads: `sampler` (the in-process
`Sampler`: decoding with the unwrapped module), `rollouts` (a GRPO step's samples handed to the
rewards: `trainer.rollouts`; or, after `sample_apart`, the samples of samplers apart from this rank,
`trainer.rollouts_apart`) and `evaluator` (held-out decoding and scoring: `trainer.evaluator`);
they read the step counts from the trainer's `progress`, and none of them imports the engine.

Host syncs: each step moves its metrics to the host once (`DeviceMetrics.to_host`). Timings need
the device to have finished a phase, so on CUDA a GRPO step synchronises at its phase boundaries
(after sampling, after the reference pass, after the update) and nowhere else; on CPU these are free.
Sampling itself reads tokens on the host to decode them for the scorer, which is a sync by nature.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from trainer.attention_backend import configure_attention, configure_policy_attention, configure_policy_linear
from trainer.compile import maybe_compile
from trainer.config import TrainerConfig
from trainer.distributed import all_reduce_sum, gather_json, rank_and_world, reduce_on, shard
from trainer.evaluator import Evaluator
from trainer.grpo.dynamic import Batch, fill_batch
from trainer.grpo.episode_rewards import own_env_metrics
from trainer.grpo.reward_source import Rewards, RewardSource
from trainer.grpo.rollout_record import rollout_rows
from trainer.grpo.selection import GroupSelection, select_groups, skip_record
from trainer.grpo.shaping import Shaped, mask_rows, shape_rewards
from trainer.grpo.step_figures import step_figures, step_sums
from trainer.grpo.update import GRPOUpdate, UpdateContext, record_empty_update
from trainer.host_memory import configure_host_memory
from trainer.metrics import DeviceMetrics, PhaseTimer
from trainer.optim import GuardedOptimizer
from trainer.policy import Policy, Reference, build_policy
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.precision import Precision, agreed_precision, configure_tf32, decoding_precision
from trainer.progress import Progress
from trainer.rng import capture_rng_state, derived_seed, restore_rng_state
from trainer.rollouts import Rollouts, RolloutSource
from trainer.rollouts_apart import RolloutsApart
from trainer.sampling.episodes import EpisodeHost
from trainer.sampling.in_process import InProcessSampler
from trainer.sampling.logprobs import completion_logprobs
from trainer.sampling.rollout import Rollout
from trainer.sampling.sampler_seam import SamplerApart
from trainer.sampling.weights_digest import trainable_weights
from trainer.sft import build_sft_batch, sft_loss_sum
from trainer.strategy import StrategyConfig, build_strategy


def _resolve_device(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


class Trainer:
    """SFT and GRPO on one policy, on one device (one rank of a data-parallel group when distributed)."""

    def __init__(
        self,
        cfg: TrainerConfig,
        tokenizer: CharTokenizer | None = None,
        device: torch.device | str = "cpu",
        *,
        stop: Sequence[str] = (),
        policy: Policy | None = None,
        episodes: EpisodeHost | None = None,
        reward_token_ids: bool = False,
        strategy: StrategyConfig | None = None,
    ) -> None:
        """The policy is `policy`, else built from cfg.model (the built-in GPT over `tokenizer`,
        initial weights drawn from cfg.seed). stop: the task's stop strings; a completion ends at
        the first one (`trainer.sampling.stop`). episodes: where multi-turn episodes run (an
        environment task): each sample is then an episode, a stop string ends a turn, and the
        episode's result is its reward (`trainer.sampling.episodes`). reward_token_ids: every
        completion goes to the rewards with its sampled ids (`trainer.data.pairs.row_fields`).
        strategy: how the ranks hold the policy (`scaling.strategy`; ddp when None)."""
        self.cfg = cfg
        self.device = _resolve_device(device)
        self.policy = policy if policy is not None else build_policy(cfg, tokenizer)
        self.tokenizer = self.policy.tokenizer
        self.rank, self.world = rank_and_world()
        configure_tf32(cfg.precision, self.device)
        configure_attention(self.device)
        configure_host_memory(self.device)
        self.precision = agreed_precision(
            Precision(cfg.precision, self.device, self.policy.width), cfg, self.policy.width
        )
        self.sampling_precision = decoding_precision(cfg, self.precision, self.device, self.policy.width)
        self.attention = configure_policy_attention(self.policy, cfg.model, self.device, self.precision.dtype)
        self.linear_kernel = configure_policy_linear(self.policy, cfg.model, self.device)
        reference_on_cpu = cfg.grpo.ref_on_cpu if cfg.grpo.beta > 0 and cfg.grpo.steps > 0 else None
        self.strategy = build_strategy(
            strategy or StrategyConfig(), self.device, self.world, self.precision, reference_on_cpu
        )
        self.model: nn.Module = self.policy.module  # replicated or sharded in place by the strategy
        wrapped = self.strategy.wrap(self.policy)
        self.train_model = maybe_compile(
            wrapped, device=self.device, enabled=cfg.model.compile, what="the training forward", dynamic=True
        )
        self._reference: Reference | None = None  # built at the first GRPO step when grpo.beta > 0
        self.record_groups = 0  # the next GRPO step returns its first N groups' rows as "rollouts"
        self.optimizers: dict[str, GuardedOptimizer] = {}
        self.progress = Progress()
        self.sampler = InProcessSampler(
            self.policy, cfg.sampling, self.sampling_precision, cfg.seed, self.device,
            stop=stop, episodes=episodes, reward_token_ids=reward_token_ids, weights=self.strategy.decoding,
        )  # fmt: skip
        self.rollouts: RolloutSource = Rollouts(self.sampler, cfg.sampling, self.progress)
        self.evaluator = Evaluator(self.sampler, cfg, self.progress)

    @property
    def sft_steps(self) -> int:
        return self.progress.sft_steps

    @property
    def grpo_steps(self) -> int:
        return self.progress.grpo_steps

    @property
    def episodes(self) -> EpisodeHost | None:
        """Where an environment task's episodes run (the sampler's); None for a single-turn task."""
        return self.sampler.episodes

    # ----------------------------------------------------------------- building blocks
    def optimizer(self, phase: str) -> GuardedOptimizer:
        """The phase's optimiser ('sft' or 'grpo'), built on first use: GRPO starts with fresh moments,
        and the SFT optimiser's moments (twice the trainable weights) are freed when it does."""
        if phase not in self.optimizers:
            c = self.cfg
            if phase == "sft":
                lr, warmup, sched, total = c.sft.lr, c.sft.warmup_steps, c.sft, c.sft.steps
            elif phase == "grpo":
                self.optimizers.pop("sft", None)
                lr, warmup, sched = c.optim.lr, c.optim.warmup_steps, c.optim
                total = c.grpo.steps * c.grpo.epochs * c.grpo.minibatches  # optimiser steps of the phase
            else:
                raise ValueError(f"phase must be 'sft' or 'grpo', got {phase!r}")
            self.optimizers[phase] = GuardedOptimizer(
                self.model, lr, warmup, c.optim, self.precision,
                schedule=sched.lr_schedule, total_steps=total, min_lr_ratio=sched.min_lr_ratio,
                strategy=self.strategy,
            )  # fmt: skip
        return self.optimizers[phase]

    def reference(self) -> Reference | None:
        """The frozen reference policy (the policy as GRPO starts: a copy, or with LoRA the base
        model with the adapter off); None when beta = 0."""
        if self.cfg.grpo.beta == 0:
            return None
        if self._reference is None:
            self._reference = self.strategy.reference(self.policy, self.cfg.grpo.ref_on_cpu)
        return self._reference

    @property
    def ref_model(self) -> nn.Module | None:
        """The reference's own module when it is a copy (what checkpoints hold); None otherwise."""
        ref = self._reference
        return ref.module if ref is not None and ref.is_copy else None

    def local_share(self, items: Sequence[Any]) -> list[Any]:
        """This rank's contiguous share of a step's items (all of them at world size 1)."""
        return shard(items, self.rank, self.world)

    def sample_apart(self, sampler: SamplerApart) -> RolloutsApart:
        """GRPO steps take their samples from `sampler` (samplers apart from this rank, fed the
        policy's weights once a step, up to grpo.max_staleness steps ahead); evaluation still decodes
        here, with the live weights."""
        self.rollouts = RolloutsApart(
            sampler, self.cfg.grpo.max_staleness, self.progress, self.published_weights,
            rank=self.rank, world=self.world, device=self.device, local_share=self.local_share,
        )  # fmt: skip
        return self.rollouts

    def published_weights(self) -> dict[str, Tensor]:
        """The policy's trainable weights (all of them, or the adapter under LoRA), whole, as CPU
        copies: what samplers apart from this rank are sent. Every rank calls it at the same point."""
        state = self.strategy.model_state(self.model)
        if not state:
            raise ValueError(
                "sampling.placement=actors sends each rank's whole weights to its samplers, and this rank "
                "holds a shard of them (scaling.strategy fsdp); use ddp"
            )
        return trainable_weights(self.model, state)

    def decoding(self):
        """A context in which the policy's weights are whole on this rank (`TrainingStrategy.decoding`):
        collective under fsdp, so every rank enters it when one decodes (a held-out evaluation)."""
        return self.strategy.decoding()

    def _finish(self, metrics: DeviceMetrics, opt: GuardedOptimizer | None) -> dict[str, float]:
        """The step's single device-to-host transfer, then the consecutive-skip check."""
        host = metrics.to_host()
        if opt is not None:
            opt.check_skips(int(host.get("consecutive_skips", 0)))
        return host

    # ----------------------------------------------------------------- SFT
    def sft_step(self, pairs: Sequence[Any]) -> dict[str, float]:
        """One optimiser step of teacher-forced cross-entropy on `pairs` (objects with .prompt/.target)."""
        start = time.perf_counter()
        opt = self.optimizer("sft")
        batch = build_sft_batch(
            self.local_share(pairs), self.tokenizer, self.device, self.policy.max_positions
        )
        total_tokens = float(reduce_on(torch.tensor([float(batch.num_tokens)]), self.device)[0])
        self.train_model.train()
        opt.zero_grad()
        lr = opt.lr
        with self.precision.autocast():
            loss_sum = sft_loss_sum(self.train_model, batch)
        loss = loss_sum * (self.world / total_tokens)  # both strategies average gradients over ranks
        self.precision.backward(loss)
        result = opt.step(loss)
        self.progress.sft_steps += 1
        m = DeviceMetrics()
        m.add("loss", all_reduce_sum(loss_sum.detach().clone()) / total_tokens)
        m.add("grad_norm", result.grad_norm)
        m.add("skipped", result.skipped)
        m.add("consecutive_skips", result.consecutive_skips)
        m.add("lr", lr)
        m.add("tokens", batch.num_tokens)
        m.add("sequences", batch.input_ids.shape[0])
        host = self._finish(m, opt)
        host["step_time_s"] = time.perf_counter() - start
        return host

    # ----------------------------------------------------------------- GRPO
    def reference_logprobs(self, rollouts: Sequence[Rollout]) -> list[Tensor] | None:
        """Log-probs `[N, L]` of each rollout under the reference model; None when beta = 0.

        With grpo.ref_on_cpu the reference computes on the device for this pass only
        (`TrainingStrategy.reference_pass`).
        """
        ref = self.reference()
        if ref is None:
            return None
        with self.strategy.reference_pass(ref), torch.no_grad(), self.precision.autocast(), ref.context():
            t = self.cfg.sampling.temperature
            share = self.policy.shared_prefix
            return [
                completion_logprobs(ref.module, r, t, entropy=False, shared_prefix=share)[0] for r in rollouts
            ]

    def grpo_step(
        self,
        pairs: Sequence[Any],
        rewards: RewardSource,
        refill: Callable[[int], Sequence[Any]] | None = None,
    ) -> dict[str, Any]:
        """Sample K completions per pair, score them through `rewards`, and make the step's updates.

        refill(t): round t's extra prompts (as many as `pairs`, every rank the same list) for
        dynamic sampling (`grpo.dynamic_sampling_tries`; `trainer.grpo.dynamic`).
        """
        start = time.perf_counter()
        timer = PhaseTimer(self.device)
        batch = self._draw(pairs, rewards, timer, 0)
        rounds = 0
        if self.cfg.grpo.dynamic_sampling_tries and refill is not None:
            batch, rounds, _ = fill_batch(
                batch,
                len(pairs),
                self.cfg.grpo.dynamic_sampling_tries,
                lambda t: self._draw(refill(t), rewards, timer, (t + 1) * len(pairs)),
                self._groups_with_signal,
            )
        host = self.grpo_update(batch.rollouts, batch.scored, batch.ref, timer, batch.prompts)
        host.update(self.rollouts.record())  # policy_version, staleness
        host.update(timer.seconds)
        host["refill_rounds"] = float(rounds)
        host["refill_prompts"] = float(rounds * len(pairs))
        host["step_time_s"] = time.perf_counter() - start
        host["completions_per_s"] = host["completions"] / host["step_time_s"]
        return host

    def _groups_with_signal(self, batch: Batch) -> int:
        """Groups of `batch` left in the policy term, summed over ranks."""
        kept = self._selection(batch.rollouts, batch.scored, batch.ref)[1].kept_groups
        return int(reduce_on(torch.tensor([kept], dtype=torch.float64), self.device)[0])

    def _draw(self, pairs: Sequence[Any], rewards: RewardSource, timer: PhaseTimer, offset: int) -> Batch:
        """This rank's share of `pairs` sampled, referenced and scored (prompt numbers from `offset`)."""
        local = self.local_share(pairs)
        with timer.phase("sample_s"), self.strategy.decoding():  # a sharded policy gathered once
            first = offset + self.rank * len(local)
            rollouts, tickets = self.rollouts.sample(local, rewards, first_index=first)
        with timer.phase("ref_s"):  # runs while the reward workers score (when they are asynchronous)
            ref_logprobs = self.reference_logprobs(rollouts)
        with timer.phase("reward_wait_s", sync=False):
            scored = self.rollouts.collect(rewards, tickets)
        return Batch(rollouts, scored, ref_logprobs, [p.prompt for p in local])

    def update_context(self) -> UpdateContext:
        return UpdateContext(
            model=self.train_model,
            precision=self.precision,
            no_sync=self.strategy.no_sync,
            world=self.world,
            device=self.device,
            temperature=self.cfg.sampling.temperature,
            max_new_tokens=self.cfg.sampling.max_new_tokens,
            shuffle_seed=derived_seed(self.cfg.seed, -3, self.rank, self.grpo_steps),
            shared_prefix=self.policy.shared_prefix,
        )

    def _selection(
        self, rollouts: Sequence[Rollout], scored: Rewards, ref_logprobs: list[Tensor] | None
    ) -> tuple[Shaped, GroupSelection]:
        """Rewards shaped (overlong, KL in the reward), groups selected, truncated rows masked."""
        cfg = self.cfg.grpo
        shaped = shape_rewards(
            cfg, rollouts, scored, ref_logprobs, self.tokenizer.eos_id, self.cfg.sampling.max_new_tokens
        )
        reduce = (lambda t: reduce_on(t, self.device)) if self.world > 1 else None
        sel = select_groups(shaped.rewards, self.cfg.sampling.group_size, cfg, reduce)
        if cfg.overlong == "mask":
            sel = mask_rows(sel, shaped.truncated)
        return shaped, sel

    def grpo_update(
        self,
        rollouts: Sequence[Rollout],
        scored: Rewards,
        ref_logprobs: list[Tensor] | None = None,
        timer: PhaseTimer | None = None,
        prompts: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The optimisation part of a GRPO step, given rollouts and their rewards (in row order);
        prompts: each group's text, for the rows `record_groups` asks for."""
        timer = timer or PhaseTimer(self.device)
        n_rows = sum(r.num_rows for r in rollouts)
        if len(scored.values) != n_rows:
            raise ValueError(f"{len(scored.values)} rewards for {n_rows} sampled completions")
        cfg = self.cfg.grpo
        if ref_logprobs is None and cfg.beta > 0:
            ref_logprobs = self.reference_logprobs(rollouts)
        shaped, sel = self._selection(rollouts, scored, ref_logprobs)
        rows = None  # read before the update, as sampled (`record_groups`)
        if self.record_groups and prompts:
            texts = self.sampler.recorded_texts
            rows = rollout_rows(rollouts, prompts, scored, shaped, sel, self.record_groups, texts)
        in_loss = ((sel.row_weight > 0) | (sel.kl_weight > 0)).sum().reshape(1).float()
        kept_rows = float(reduce_on(in_loss, self.device)[0])
        loss_ref = ref_logprobs if cfg.kl_placement == "loss" else None
        opt = self.optimizer("grpo")
        m = DeviceMetrics()
        m.add("lr", opt.lr)
        with timer.phase("update_s"):
            if kept_rows > 0:
                GRPOUpdate(self.update_context(), cfg, opt, rollouts, sel, loss_ref).run(m)
            else:  # every group dropped everywhere: nothing to learn, no optimiser step
                record_empty_update(m, opt)
            m.add("empty_update", float(kept_rows == 0))
            m.add("tokens", sum(r.completion_mask.sum() for r in rollouts))
            host = self._finish(m, opt)
        self.progress.grpo_steps += 1
        gather = functools.partial(gather_json, device=self.device)  # [sums] alone at world size 1
        sums = step_sums(shaped, sel, scored, self.cfg.sampling.group_size, gather)
        if kept_rows == 0:
            host.update(skip_record(sums))
        host.update(step_figures(sums))  # over every rank's rows
        host.update(own_env_metrics(self.episodes, scored, gather))  # an environment's own aggregate
        if rows is not None:
            host["rollouts"] = rows
        return host

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Everything for an exact resume: weights, reference, optimisers, scaler, counters, RNG, config.

        Sampling needs no generator state: each row's noise is keyed by (seed, GRPO step, prompt, sample).
        Weights and optimiser states are whole (`TrainingStrategy.model_state`): every rank calls this
        together (collective under fsdp, where rank 0 alone gets them), and any world size and either
        strategy loads them. Under ddp tensors are live views of the trainer's own: serialise them
        (save_checkpoint) before training on.
        """
        ref = self.ref_model
        state = {
            "model": self.strategy.model_state(self.model),
            "ref_model": None if ref is None else self.strategy.model_state(ref),
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "precision": self.precision.state_dict(),
            "counters": {"sft_steps": self.sft_steps, "grpo_steps": self.grpo_steps},
            "rng": capture_rng_state(self.device),
            "config": self.cfg.model_dump(mode="json"),
        }
        if sampling := self.rollouts.state_dict():  # batches sampled ahead, on their way
            state["sampling"] = sampling
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Every rank loads the same whole state (written by any world size, under either strategy)."""
        self.strategy.load_model_state(self.model, state["model"])
        if state.get("ref_model") is not None:
            self._reference = None
            ref = self.reference()
            if ref is None:
                raise ValueError("checkpoint has a reference model but grpo.beta is 0")
            self.strategy.load_model_state(ref.module, state["ref_model"])
        for name, opt_state in state["optimizers"].items():
            self.optimizer(name).load_state_dict(opt_state)
        self.precision.load_state_dict(state["precision"])
        self.progress.sft_steps = int(state["counters"]["sft_steps"])
        self.progress.grpo_steps = int(state["counters"]["grpo_steps"])
        restore_rng_state(state["rng"], self.device)
        self.rollouts.load_state_dict(state.get("sampling") or {})
