"""The per-worker Ray Train loop: SFT warm start, then GRPO with the shared reward pool.

One call of `train_loop_per_worker` per Ray Train worker (one DDP rank). Ray Train has set up
torch.distributed (gloo on CPU, NCCL on GPU); `trainer.engine.Trainer` wraps DDP itself and
takes this rank's share of each step's pairs. Every rank samples K completions for its share,
sends them to the shared reward pool as each micro-batch finishes and takes the rewards back
through the object store; then the ranks make one DDP update.

Per global step s (one counter over SFT and GRPO; `trainer.schedule` says what is due when):
    train -> rank 0 publishes the step record -> held-out eval when due (rank 0)
    -> ranks agree on the stop flag -> checkpoint when due or stopping -> stop if asked.
A checkpoint at step s therefore covers every record up to s.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import ray.train
import ray.train.torch
import torch

from actors.pool.config import PoolConfig
from actors.pool.placement import PlacedRewards
from actors.pool.reward_pool import RewardPool
from actors.run.control import CHECKPOINT, ERROR, EVAL, START, STEP, TRAIN_POLL_ENV
from actors.run.step_data import StepData
from actors.run.threads import apply_threads, choose_sampling_threads
from trainer.checkpoint import (
    CheckpointWriteError,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    step_dir_name,
    write_failure_message,
)
from trainer.compile import compile_unsupported_reason
from trainer.config import TrainerConfig
from trainer.data.pairs import Pair
from trainer.distributed import reduce_on
from trainer.engine import Trainer
from trainer.policy import CharTokenizer, PromptFormat, build_policy
from trainer.rng import derived_seed
from trainer.schedule import Schedule
from trainer.task import TrainingTask

log = logging.getLogger(__name__)

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
    checkpoint_dir: str | None = None  # where Ray Train persists checkpoints (checked after each one)
    prompt_format: PromptFormat = PromptFormat()  # how an hf policy's tokenizer renders prompts
    torch_threads: int | None = None  # None: the node's cores shared among its trainer workers
    sampling_threads: int | str | None = None  # None: the rule; "auto": timed (`actors.run.threads`)
    scorer: Any = None  # the pool's scorer, for scoring in process (pool.placement auto | inline)


def runtime_settings(trainer: Trainer) -> dict[str, Any]:
    """What this worker computes with, where the config leaves it to the machine."""
    cfg, compilable = trainer.cfg, compile_unsupported_reason(trainer.device) is None
    return {
        "device": str(trainer.device),
        "precision": trainer.precision.dtype,
        "precision_reason": trainer.precision.reason,
        "model_compile": cfg.model.compile and compilable,
        "sampling_compile": cfg.sampling.compile and compilable,
        TRAIN_POLL_ENV: os.environ.get(TRAIN_POLL_ENV),  # how long a checkpoint may wait for Ray Train
    }


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry point; config = {"spec": LoopSpec, "control": RunControl actor handle}."""
    WorkerLoop(config["spec"], config["control"]).run()


class WorkerLoop:
    """One rank's run: restore, step, evaluate, checkpoint, stop."""

    def __init__(self, spec: LoopSpec, control: Any):
        self.spec = spec
        self.control = control
        context = ray.train.get_context()
        self.rank, self.world = context.get_world_rank(), context.get_world_size()
        self.device = ray.train.torch.get_device()
        threads = apply_threads(spec.torch_threads, context.get_local_world_size())
        builtin = spec.trainer.model.source == "builtin"
        tokenizer = CharTokenizer(spec.task.alphabet) if builtin else None  # an hf policy brings its own
        policy = build_policy(spec.trainer, tokenizer, spec.prompt_format)
        self.trainer = Trainer(spec.trainer, device=self.device, stop=spec.task.stop, policy=policy)
        prompt = spec.eval_pairs[0].prompt if spec.eval_pairs else None
        threads.update(choose_sampling_threads(self.trainer, spec.sampling_threads, prompt))
        self.runtime = {**runtime_settings(self.trainer), **threads}
        self.schedule = Schedule.of(spec.trainer)
        self._pool: RewardPool | None = None
        self._placed: PlacedRewards | None = None
        self._last_checkpoint = -1
        self._last_good: str | None = None  # the newest checkpoint known to be on the storage
        self._registered_through = 0  # Ray Train already lists checkpoints named up to this step

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        step = 0
        try:
            # torch seeds its global RNG randomly in each process; dropout draws from it. Seed it
            # from the run's seed (apart from the sampling seeds (seed, rank, step >= 0)) so a run
            # repeats exactly; a restore then replaces it with the checkpoint's RNG state.
            torch.manual_seed(derived_seed(self.spec.trainer.seed, self.rank, -1))
            step = self.restore()
            self._publish(
                START,
                {"from_step": step if step else None, "world_size": self.world, "runtime": self.runtime},
            )
            if step == 0 and self.schedule.eval_due(0):  # GRPO from scratch: evaluate step 0 first
                self.evaluate(0, "start")
            data = StepData(self.schedule, self._source(), self.rank, self.world)
            try:
                while step < self.schedule.total:
                    step += 1
                    self.train_step(step, data)
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
        except Exception as exc:
            self._publish(ERROR, {"step": step, "reason": f"{type(exc).__name__}: {exc}"})
            raise
        finally:
            if self._placed is not None:
                self._placed.shutdown()
            if self._pool is not None:
                self._pool.shutdown()  # a front-end only: the driver owns the workers

    def train_step(self, step: int, data: StepData) -> None:
        phase = self.schedule.phase_of(step)
        pairs = data.pairs(step)
        if phase == "sft":
            metrics = self.trainer.sft_step(pairs)
        else:
            metrics = self.trainer.grpo_step(pairs, self.rewards(), refill=lambda t: data.refill(step, t))
            metrics.update(self._pool_health())
        self._publish(STEP, {"step": step, "phase": phase, "time": time.time(), **metrics})

    def _pool_health(self) -> dict[str, float]:
        """Reward workers this rank's pool front-end counts, and how many of them take work now."""
        if self.rank != 0:
            return {}
        states = [w["state"] for w in self.pool().stats()["workers"].values()]
        return {"pool_workers": float(len(states)), "pool_workers_alive": float(states.count("healthy"))}

    # ------------------------------------------------------------------ pieces
    def pool(self) -> RewardPool:
        """This worker's front-end to the driver's reward workers (attached on first use)."""
        if self._pool is None:
            self._pool = RewardPool.attach(self.spec.pool, run_id=self.spec.run_id)
        return self._pool

    def rewards(self) -> RewardPool | PlacedRewards:
        """Where this rank's GRPO rewards are scored: the pool, or in process when that is cheaper."""
        if self.spec.pool.placement == "pool" or self.spec.scorer is None:
            return self.pool()
        if self._placed is None:
            self._placed = PlacedRewards(
                self.pool(), self.spec.scorer, self.spec.pool.placement, log=self._say
            )
        return self._placed

    def _say(self, line: str) -> None:
        # Written to the stream, not print()ed: Ray Train patches print() in its workers to log
        # the line as well as print it, so the driver showed every such line twice.
        if self.rank == 0:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def _source(self):
        pairs = None if self.spec.train_pairs is None else ray.get(self.spec.train_pairs)
        return self.spec.task.train_stream(pairs)

    def _publish(self, kind: str, record: dict[str, Any]) -> None:
        if self.rank == 0:
            self.control.publish.remote(kind, record)  # fire and forget: records keep their order

    def evaluate(self, step: int, kind: str) -> None:
        """Greedy completions of the held-out pairs, scored by the reward pool (rank 0 only)."""
        if self.rank != 0:
            return
        began = time.perf_counter()
        pool = self.pool()
        result = self.trainer.evaluate(
            self.spec.eval_pairs,
            lambda completions, targets, fields=None: pool.score(completions, targets, fields),
            n_samples=self.spec.eval_samples,
            metrics_fn=self.spec.task.eval_metrics,
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
        """Rank 0 writes the trainer state; Ray Train persists it as `<storage>/step_<step>`."""
        # After a fall-back past a bad checkpoint Ray Train still lists it: saving that name again
        # would give it two entries for one directory, and pruning one deletes the other's files.
        if step == self._last_checkpoint or step <= self._registered_through:
            return
        self._last_checkpoint = step
        metrics = {"step": step}
        if self.rank != 0:
            ray.train.report(metrics)  # every rank reports: it is a barrier
            return
        self._wait_recorded(step)
        extra = {"step": step, "run_id": self.spec.run_id, "world_size": self.world}
        staging = None
        try:
            staging = Path(tempfile.mkdtemp(prefix="grpo-ckpt-"))
            path = save_checkpoint(staging, step, self.trainer.state_dict(), extra, keep_last=1)
            ray.train.report(
                metrics,
                checkpoint=ray.train.Checkpoint.from_directory(str(path)),
                checkpoint_dir_name=step_dir_name(step),
            )
            self._check_persisted(step)
        except CheckpointWriteError:
            raise
        except Exception as exc:  # the storage failed: say so and stop (see README, "What survives what")
            # Ray may wrap the OS error, or only find its storage marker gone: then ask the OS directly.
            cause = _os_error_in(exc)
            why = f"{type(cause).__name__}: {cause}" if cause else _storage_problem(self.spec.checkpoint_dir)
            what = " ".join((why or f"{type(exc).__name__}: {exc}").split())[:600]  # one line
            raise CheckpointWriteError(self._write_failure(step, what)) from exc
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        self._last_good = step_dir_name(step)
        self._publish(CHECKPOINT, {"step": step, "name": step_dir_name(step)})

    def _check_persisted(self, step: int) -> None:
        """A checkpoint Ray Train accepted must be on the storage, whole: never silently missing."""
        if self.spec.checkpoint_dir is None:
            return
        manifest = Path(self.spec.checkpoint_dir) / step_dir_name(step) / "manifest.json"
        if not manifest.is_file():
            raise CheckpointWriteError(self._write_failure(step, f"{manifest} is missing after the write"))

    def _write_failure(self, step: int, why: str) -> str:
        where = self.spec.checkpoint_dir or "Ray Train's storage"
        return write_failure_message(f"checkpoint {step_dir_name(step)}", where, why, self._last_good)

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

    def restore(self) -> int:
        """Load Ray Train's latest checkpoint, if any; returns its step (0 when starting afresh)."""
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return 0
        with checkpoint.as_directory() as directory:
            state, extra = load_verified(Path(directory))
        self.trainer.load_state_dict(state)
        self._last_checkpoint = int(extra["step"])
        self._last_good = step_dir_name(self._last_checkpoint)
        self._registered_through = int(Path(checkpoint.path).name.removeprefix("step_"))
        return int(extra["step"])


def _storage_problem(directory: str | None) -> str | None:
    """What the OS answers when a file is created in `directory` (None: it can be, or no directory)."""
    if directory is None:
        return None
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
            pass
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _os_error_in(exc: BaseException) -> OSError | None:
    """The innermost OSError in an exception's chain of causes, if any (disk full, permission, ...)."""
    found, seen = None, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError):
            found = exc
        exc = exc.__cause__ or exc.__context__
    return found


def load_verified(path: Path) -> tuple[dict, dict]:
    """(trainer_state, extra) of a checkpoint directory, falling back to older `step_*` siblings
    when it does not match its manifest (a copy cut short, a corrupt file)."""
    try:
        return load_checkpoint(path)
    except Exception as exc:
        log.warning(
            "checkpoint %s cannot be loaded (%s: %s); trying older ones", path, type(exc).__name__, exc
        )
        failure = exc
    for _, older in list_checkpoints(path.parent):
        if older.name >= path.name:
            continue
        try:
            return load_checkpoint(older)
        except Exception as exc:  # keep looking further back
            log.warning("checkpoint %s cannot be loaded either (%s)", older, exc)
    raise RuntimeError(f"no loadable checkpoint at or before {path}: {failure}") from failure
