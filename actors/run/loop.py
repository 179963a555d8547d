"""One rank's run: SFT warm start, then GRPO with the shared reward pool, over a run context.

The loop talks to its run context (`actors.run.context`) for its rank, world and device, its
reports (a barrier across the ranks) and its checkpoints: under Ray Train one loop runs per
worker (one data-parallel rank; `actors.run.ray_context`), with `run.backend: local` the one loop
runs in the driver process (`LocalRun`). `trainer.engine.Trainer` holds the policy through the
run's training strategy (`scaling.strategy`: DDP, or FSDP sharding it over the ranks) and takes
this rank's share of each step's pairs. Every rank samples K completions for its share, sends them
to the shared reward pool as each micro-batch finishes and takes the rewards back through the
object store; then the ranks make one update. Under fsdp a checkpoint's state and a held-out
evaluation's gathered weights are collective: every rank takes part, rank 0 writes and evaluates.

Per global step s (one counter over SFT and GRPO; `trainer.schedule` says what is due when):
    train -> rank 0 publishes the step record -> held-out eval when due (rank 0)
    -> ranks agree on the stop flag -> checkpoint when due or stopping -> stop if asked.
A checkpoint at step s therefore covers every record up to s. A GRPO step whose rewards, over
every rank's items, fail the run (`actors.pool.failure_policy`) is checkpointed and ends the run:
each rank returns and the driver ends it `failed` with the one line rank 0 published.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch

from actors.pool.codec import component_sums, encode, reported_components
from actors.pool.config import PoolConfig
from actors.pool.failure_policy import BatchCounts, error_rate_problem
from actors.pool.placement import PlacedRewards
from actors.pool.reward_pool import RewardPool
from actors.pool.worker_watch import RssWatch
from actors.run.checkpoints import CheckpointWriter, load_verified
from actors.run.context import RunContext
from actors.run.control import CHECKPOINT, ERROR, EVAL, ROLLOUTS, START, STEP, TRAIN_POLL_ENV
from actors.run.heap import frozen_heap
from actors.run.kept_runtime import KeptRuntime
from actors.run.pool_roster import RosterFollower
from actors.run.samplers import plan_steps, start_samplers
from actors.run.step_data import StepData
from actors.run.threads import apply_threads, choose_sampling_threads
from trainer.checkpoint import step_dir_name
from trainer.compile import compile_unsupported_reason
from trainer.config import TrainerConfig
from trainer.data.pairs import Pair
from trainer.distributed import reduce_on
from trainer.engine import Trainer
from trainer.grpo.reward_source import component_means
from trainer.policy import CharTokenizer, PromptFormat, build_policy
from trainer.rng import derived_seed
from trainer.schedule import Schedule
from trainer.strategy import StrategyConfig
from trainer.task import TrainingTask

CONTROL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class LoopSpec:
    """What every worker needs, sent once through `train_loop_config` (pickled)."""

    trainer: TrainerConfig
    task: TrainingTask
    pool: PoolConfig
    run_id: str
    eval_pairs: list[Pair]
    eval_samples: int = 3
    train_pairs: Any = None  # ray.ObjectRef of list[Pair] for file sources; None: the task generates them
    checkpoint_dir: str | None = None  # where the context keeps checkpoints (checked after each one)
    prompt_format: PromptFormat = PromptFormat()  # how an hf policy's tokenizer renders prompts
    torch_threads: int | None = None  # None: the node's cores shared among its trainer workers
    sampling_threads: int | str | None = None  # None: the rule; "auto": timed (`actors.run.threads`)
    omp_wait_policy_from: str | None = None  # why the driver set OpenMP's wait policy as it did
    scorer: Any = None  # the pool's scorer, for scoring in process (pool.placement auto | inline)
    reward_token_ids: bool = False  # the rewards take each completion's token ids (TRL's completion_ids)
    rollouts_every: int = 0  # GRPO steps between recorded training completions (0: none)
    rollout_groups: int = 4  # prompt groups of rank 0 recorded on such a step
    strategy: StrategyConfig = StrategyConfig()  # how the ranks hold the policy (scaling.strategy)


def kept_spec(spec: LoopSpec, kept: KeptRuntime | None) -> LoopSpec:
    """`spec` with the choices its config leaves to the machine made as the continued run made them."""
    if kept is None:
        return spec
    return dataclasses.replace(
        spec,
        trainer=kept.trainer_config(spec.trainer),
        torch_threads=kept.torch_threads(spec.torch_threads),
        sampling_threads=kept.sampling_threads(spec.sampling_threads),
    )


def runtime_settings(trainer: Trainer) -> dict[str, Any]:
    """What this worker computes with, where the config leaves it to the machine."""
    cfg, compilable = trainer.cfg, compile_unsupported_reason(trainer.device) is None
    return {
        "device": str(trainer.device),
        "precision": trainer.precision.dtype,
        "precision_reason": trainer.precision.reason,
        "sampling_precision": trainer.sampling_precision.dtype,
        "sampling_precision_reason": trainer.sampling_precision.reason,
        **trainer.attention,  # the policy's attention kernel and why
        **trainer.linear_kernel,  # the built-in GPT's fp32 linear kernel and why
        **trainer.strategy.record(),  # ddp or fsdp, and the dtype fsdp gathers weights in
        "model_compile": cfg.model.compile and compilable,
        "sampling_compile": cfg.sampling.compile and compilable,
        TRAIN_POLL_ENV: os.environ.get(TRAIN_POLL_ENV),  # how long a checkpoint may wait for Ray Train
    }


class LoopFailed(RuntimeError):
    """The in-process loop raised. Shaped like Ray Train's TrainingFailedError (`worker_failures`:
    {rank: exception}), so the driver words a failure the same way whichever backend ran the loop."""

    def __init__(self, error: BaseException):
        super().__init__(f"worker 0: {type(error).__name__}: {error}")
        self.worker_failures = {0: error}

    def __reduce__(self):  # rebuilt from the error, not from the message made of it
        return type(self), (self.worker_failures[0],)


class RunEnded(Exception):
    """A rule of the run ended it after a checkpoint (the reward error rate): every rank returns,
    and the driver reads the one-line reason from the published `error` record, no traceback."""


class LocalRun:
    """The loop in this process (`run.backend: local`); `fit()` as TorchTrainer's, without Ray Train.

    make_context is called in `fit()`, so that a context that cannot be made (no CUDA device)
    fails the run the way a worker that cannot start does.
    """

    def __init__(self, spec: LoopSpec, control: Any, make_context: Callable[[], RunContext]):
        self.spec = spec
        self.control = control
        self.make_context = make_context

    def fit(self) -> None:
        try:
            WorkerLoop(self.spec, self.control, self.make_context()).run()
        except Exception as exc:
            raise LoopFailed(exc) from exc


class WorkerLoop:
    """One rank's run: restore, step, evaluate, checkpoint, stop."""

    def __init__(self, spec: LoopSpec, control: Any, context: RunContext):
        self.control = control
        self.context = context
        self.rank, self.world = context.rank, context.world_size
        self.device = context.device
        self._checkpoint = self._latest_checkpoint()  # read first: it says what the run computed with
        kept = KeptRuntime.of_checkpoint(self._checkpoint[1]) if self._checkpoint else None
        configured, self.spec = spec, kept_spec(spec, kept)
        spec = self.spec
        threads = apply_threads(spec.torch_threads, context.local_world_size)
        threads["omp_wait_policy_from"] = spec.omp_wait_policy_from
        builtin = spec.trainer.model.source == "builtin"
        tokenizer = CharTokenizer(spec.task.alphabet) if builtin else None  # an hf policy brings its own
        policy = build_policy(spec.trainer, tokenizer, spec.prompt_format)
        # an environment task's: samples are episodes (on the pool's workers: attached on first use)
        episodes = spec.task.episode_host(lambda: self.pool().workers)
        self.trainer = Trainer(
            spec.trainer,
            device=self.device,
            stop=spec.task.stop,
            policy=policy,
            episodes=episodes,
            reward_token_ids=spec.reward_token_ids,
            strategy=spec.strategy,
        )
        prompt = spec.eval_pairs[0].prompt if spec.eval_pairs else None
        threads.update(choose_sampling_threads(self.trainer, spec.sampling_threads, prompt))
        self._samplers = None  # the sampler actors of sampling.placement=actors; None: it samples itself
        if spec.trainer.sampling.placement == "actors":
            self._samplers = start_samplers(
                self.trainer,
                spec.task,
                prompt_format=spec.prompt_format,
                reward_token_ids=spec.reward_token_ids,
                pool=spec.pool,
                run_id=spec.run_id,
                rank=self.rank,
            )
        self.runtime = {**runtime_settings(self.trainer), **threads}
        if kept is not None:  # what the config left to the machine, as the continued run had it
            self.runtime.update(
                kept.record_of(configured.trainer, configured.torch_threads, configured.sampling_threads)
            )
        self.schedule = Schedule.of(spec.trainer)
        self._pool: RewardPool | None = None
        # an autoscaled pool: the workers' roster the driver publishes, followed at each GRPO step
        self._roster = RosterFollower(control, CONTROL_TIMEOUT_S) if spec.pool.autoscale is not None else None
        self._placed: PlacedRewards | None = None
        self._kept_placement = self._checkpoint[1].get("placement") if self._checkpoint else None
        pool_cfg = spec.pool
        self._rss_watch = RssWatch(
            pool_cfg.rss_warn_growth_mb, pool_cfg.rss_warn_rising_steps, pool_cfg.max_worker_rss_mb
        )
        self._last_checkpoint = -1
        self._writer = CheckpointWriter(context, spec.checkpoint_dir)
        self._registered_through = 0  # the context already lists checkpoints named up to this step

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        step = 0
        try:
            # torch seeds its global RNG randomly in each process; dropout draws from it. Seed it
            # from the run's seed (apart from the sampling seeds (seed, rank, step >= 0)) so a run
            # repeats exactly; a restore then replaces it with the checkpoint's RNG state. Python's
            # and numpy's too: a checkpoint holds them, so two runs of one config write the same bytes.
            seed = derived_seed(self.spec.trainer.seed, self.rank, -1)
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed % 2**32)
            step = self.restore()
            self._publish(
                START,
                {"from_step": step if step else None, "world_size": self.world, "runtime": self.runtime},
            )
            if step == 0 and self.schedule.eval_due(0):  # GRPO from scratch: evaluate step 0 first
                self.evaluate(0, "start")
            source, grpo_source = self._sources()
            data = StepData(self.schedule, source, self.rank, self.world, grpo_source=grpo_source)
            if self._samplers is not None:
                plan_steps(self.trainer, self.schedule, data)
            try:
                with frozen_heap():  # full garbage collections skip what the run was built of
                    while step < self.schedule.total:
                        step += 1
                        ended = self.train_step(step, data)
                        if ended is not None:
                            self.checkpoint(step)  # the step kept only usable groups: a state to resume from
                            raise RunEnded(ended)
                        kind = self.schedule.eval_due(step)
                        if kind:
                            self.evaluate(step, kind)
                        stopping = self.stop_agreed()
                        if self.schedule.checkpoint_due(step, stopping):
                            self.checkpoint(step)
                        if stopping:
                            break
            finally:
                data.close()
        except RunEnded as exc:  # said once, by the driver's summary; the workers return normally
            self._publish(ERROR, {"step": step, "reason": str(exc)})
        except Exception as exc:
            self._publish(ERROR, {"step": step, "reason": f"{type(exc).__name__}: {exc}"})
            raise
        finally:
            if self._samplers is not None:
                self._samplers.shutdown()
            if self._placed is not None:
                self._placed.shutdown()
            if self._pool is not None:
                self._pool.shutdown()  # a front-end only: the driver owns the workers

    def train_step(self, step: int, data: StepData) -> str | None:
        """One step, its record published; the line ending the run when its rewards fail it."""
        phase = self.schedule.phase_of(step)
        pairs = data.pairs(step)
        if phase == "sft":
            metrics = self.trainer.sft_step(pairs)
        else:
            resized = self._roster.follow(self.pool(), self.rank == 0) if self._roster is not None else {}
            rewards = None if self.trainer.episodes is not None else self.rewards()
            self.trainer.record_groups = self._rollout_groups()
            metrics = self.trainer.grpo_step(pairs, rewards, refill=lambda t: data.refill(step, t))
            if self._pool is not None:  # a pool serves this run (its rewards or its episodes)
                metrics.update(self._pool_health(step), **resized)
            metrics.update(self._failure_reasons(metrics))
            if rows := metrics.pop("rollouts", None):
                self._publish(ROLLOUTS, {"step": step, "rows": rows})
        self._publish(STEP, {"step": step, "phase": phase, "time": time.time(), **metrics})
        return self.reward_failure(step, metrics) if phase == "grpo" else None

    def _rollout_groups(self) -> int:
        """Groups the coming GRPO step records (logging.rollouts_every: its 1st, (1+every)th, ...)."""
        every = self.spec.rollouts_every
        recorded = self.rank == 0 and every and self.trainer.grpo_steps % every == 0
        return self.spec.rollout_groups if recorded else 0

    def reward_failure(self, step: int, metrics: dict[str, Any]) -> str | None:
        """Whether the step's rewards, over every rank's items, fail the run (`failure_policy`):
        the record's pool counts are the step's over every rank, so every rank gives the same
        answer; the reasons are this rank's first ones."""
        counts = BatchCounts.of_stats(metrics, prefix="scorer_")
        problem = error_rate_problem(counts, self.spec.pool.error_rate_threshold)
        if problem is None:
            return None
        return f"reward error rate exceeded at step {step}: {problem}; first reasons: {self._reasons()}"

    def _reasons(self) -> list[str]:
        """This rank's first reasons of the step's failed rewards (or episodes), one line each."""
        if self._samplers is not None:  # the sampler actors scored the step
            source = self.trainer.rollouts
        elif self.trainer.episodes is not None:
            source = self.trainer.episodes
        else:
            source = self.rewards()
        return [" ".join(r.split())[:200] for r in getattr(source, "failure_reasons", [])]

    def _failure_reasons(self, metrics: dict[str, Any]) -> dict[str, list[str]]:
        """`reward_failure_reasons` for a step record whose rewards failed on some items (rank 0's
        first reasons), so that a run those failures do not end still says why they failed."""
        if not BatchCounts.of_stats(metrics, prefix="scorer_").failed or self.rank != 0:
            return {}
        return {"reward_failure_reasons": self._reasons()}

    def _pool_health(self, step: int) -> dict[str, float]:
        """Reward workers this rank's pool front-end counts, how many of them take work now and the
        largest worker RSS; says once what the pool has to say (a reward's output, a recycle, a
        worker whose memory keeps growing)."""
        if self.rank != 0:
            return {}
        pool = self.pool()
        stats = pool.stats()
        workers = stats["workers"].values()
        states = [w["state"] for w in workers]
        health = {"pool_workers": float(len(states)), "pool_workers_alive": float(states.count("healthy"))}
        rss = [w["rss_mb"] for w in workers if w.get("rss_mb") is not None]
        if rss:
            health["pool_worker_rss_mb_max"] = round(max(rss), 1)
        if self._roster is not None:  # what the driver sizes the pool by
            if (cost := stats.get("seconds_per_item")) is not None:
                health["pool_seconds_per_item"] = cost
            health["pool_roster_version"] = float(self._roster.version)
        for line in [*pool.take_notices(), *self._rss_watch.observe(step, pool.worker_rss_mb())]:
            self._say(line)
        return health

    # ------------------------------------------------------------------ pieces
    def pool(self) -> RewardPool:
        """This worker's front-end to the driver's reward workers (attached on first use; an
        autoscaled pool's as its roster lists them now)."""
        if self._pool is None:
            names = self._roster.names() if self._roster is not None else None
            # The step's rule is applied over every rank's items (`reward_failure`), not per collect.
            self._pool = RewardPool.attach(
                self.spec.pool, run_id=self.spec.run_id, enforce_error_rate=False, names=names
            )
        return self._pool

    def rewards(self) -> RewardPool | PlacedRewards:
        """Where this rank's GRPO rewards are scored: the pool, or in process when that is cheaper."""
        if self.spec.pool.placement == "pool" or self.spec.scorer is None or self._samplers is not None:
            return self.pool()  # (with sampler actors the actors score, on the pool)
        if self._placed is None:
            self._placed = PlacedRewards(
                self.pool(), self.spec.scorer, self.spec.pool.placement, log=self._say
            )
            self._placed.load_state_dict(self._kept_placement)  # the continued run's decision
        return self._placed

    def _say(self, line: str) -> None:
        if self.rank == 0:
            self.context.say(line)

    def _sources(self):
        """The streams of SFT and of GRPO steps (`StepData`)."""
        pairs = None if self.spec.train_pairs is None else ray.get(self.spec.train_pairs)
        return self.spec.task.train_stream(pairs), self.spec.task.grpo_stream(pairs)

    def _publish(self, kind: str, record: dict[str, Any]) -> None:
        if self.rank == 0:
            self.control.publish.remote(kind, record)  # fire and forget: records keep their order

    def _held_out_figures(self, scored: Any) -> dict[str, Any]:
        """The task's held-out figures, and the mean of each named part of the reward
        (`reward_components`, as a GRPO step reports them) over the held-out completions."""
        figures = dict(self.spec.task.eval_metrics(scored))
        names = reported_components(self.spec.scorer)
        if names and isinstance(scored, list) and all(hasattr(r, "components") for r in scored):
            if parts := component_means(component_sums([encode(scored, names)])):
                figures["reward_components"] = parts
        return figures

    def evaluate(self, step: int, kind: str) -> None:
        """Greedy completions of the held-out pairs, scored by the reward pool (rank 0 only, inside
        weights every rank gathers with it under fsdp)."""
        with self.trainer.decoding():
            if self.rank == 0:
                self._evaluate(step, kind)

    def _evaluate(self, step: int, kind: str) -> None:
        began = time.perf_counter()
        pool = self.pool() if self.trainer.episodes is None else None  # episodes score themselves
        result = self.trainer.evaluator.evaluate(
            self.spec.eval_pairs,
            lambda completions, targets, fields=None: pool.score(completions, targets, fields),
            n_samples=self.spec.eval_samples,
            metrics_fn=self._held_out_figures,
            group_by=getattr(self.spec.task, "eval_group", None),
            # pass@k costs k completions per held-out prompt: at the GRPO start and the end only
            sample_k=self.spec.trainer.grpo.eval_k if kind in ("start", "final") else 0,
        )
        record = {
            "step": step,
            "phase": self.schedule.phase_of(step),
            "kind": kind,
            "time": time.time(),
        }
        record.update(result, eval_time_s=time.perf_counter() - began)
        self._publish(EVAL, record)

    def stop_agreed(self) -> bool:
        """Whether to stop after this step; rank 0 reads the flag and every rank gets its answer."""
        flag = 0.0
        if self.rank == 0:
            reason = ray.get(self.control.stop_reason.remote(), timeout=CONTROL_TIMEOUT_S)
            flag = 1.0 if reason else 0.0
        return bool(reduce_on(torch.tensor([flag]), self.device)[0] > 0)

    def checkpoint(self, step: int) -> None:
        """Rank 0 writes the trainer state (every rank takes part in gathering it); the context
        keeps it as `<checkpoint root>/step_<step>`."""
        # After a fall-back past a bad checkpoint the context still lists it: saving that name again
        # would give Ray Train two entries for one directory, and pruning one deletes the other's files.
        if step == self._last_checkpoint or step <= self._registered_through:
            return
        self._last_checkpoint = step
        metrics = {"step": step}
        state = self.trainer.state_dict()  # every rank: a sharded policy is gathered to rank 0
        if self.rank != 0:
            self.context.report(metrics)  # every rank reports: it is a barrier
            return
        self._wait_recorded(step)
        extra = {"step": step, "run_id": self.spec.run_id, "world_size": self.world, "runtime": self.runtime}
        if self._placed is not None:
            extra["placement"] = self._placed.state_dict()
        if self.spec.pool.autoscale is not None and self._pool is not None:  # a resumed run starts at it
            extra["pool_workers"] = self._pool.workers.num_workers
        self._writer.write(step, state, extra, metrics)
        self._publish(CHECKPOINT, {"step": step, "name": step_dir_name(step)})

    def _wait_recorded(self, step: int) -> None:
        """Until the driver has written every record published so far: a checkpoint then never
        covers a step whose record a dying driver could still lose."""
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        while ray.get(self.control.unwritten.remote(), timeout=CONTROL_TIMEOUT_S) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the driver has not written the records up to step {step} for {CONTROL_TIMEOUT_S:g}s"
                )
            time.sleep(0.02)

    def _latest_checkpoint(self) -> tuple[dict, dict, str] | None:
        """(trainer state, extra, the name the context lists) of the context's latest checkpoint."""
        found = self.context.latest_checkpoint()
        if found is None:
            return None
        state, extra = load_verified(found.path)
        return state, extra, found.name

    def restore(self) -> int:
        """Load the latest checkpoint (read when the loop was built), if any; returns its step (0
        when starting afresh)."""
        if self._checkpoint is None:
            return 0
        state, extra, name = self._checkpoint
        self._checkpoint = None  # the state is the trainer's now: not held twice
        self.trainer.load_state_dict(state)
        self._last_checkpoint = int(extra["step"])
        self._writer.last_good = step_dir_name(self._last_checkpoint)
        self._registered_through = int(name.removeprefix("step_"))
        return int(extra["step"])
