"""The driver of one run: Ray, the reward pool, the control actor, the Ray Train worker group.

    ray.init ─► RunControl actor ─► RewardPool (M CPU actors) ─► TorchTrainer(N workers).fit()
                     ▲   │ records                                   │ rank 0 publishes
                     │   └──────────── drained every 0.2 s ◄─────────┘
       SIGTERM/SIGINT sets its stop flag

`fit()` runs in a background thread; the main thread drains the control actor's events into
the run directory and the job log, and turns SIGTERM (what `ray job stop` sends, or `kill -TERM
-PGID` to the driver's whole process group: the Ray a run starts runs apart, `service.ray_group`)
or Ctrl-C into a stop request: the workers finish the current step, checkpoint and return. With
`run.backend: local` that thread runs the one rank's loop itself (`actors.run.LocalRun`): the
same control actor, reward pool, records and console, without Ray Train's start-up.

Ray is joined or started in `service.ray_start`; what `fit()` is called on is built in
`service.run_backend`; the signals are caught by `service.stop_signals`.
"""

from __future__ import annotations

import threading
from typing import Any

import ray

from actors.pool.reward_pool import RewardPool
from actors.pool.worker_pool import WorkerPool
from actors.run.control import STEP, start_run_control
from actors.run.loop import LoopSpec
from actors.run.omp_env import apply_wait_policy, cluster_wait_policy
from service.config import ServiceConfig, prompt_format, trainer_config
from service.console import Console, make_console
from service.loggers import open_loggers
from service.pool_resizer import PoolResizer, cluster_demand, starting_pool
from service.ray_start import init_ray
from service.recorder import RunRecorder
from service.report import load_plotting, write_html_report, write_report
from service.run_backend import build_run, checkpoint_root
from service.scaling_strategy import strategy_config
from service.stop_signals import StopSignals
from service.tasks import Task
from trainer.checkpoint import CheckpointWriteError, write_failure_message
from trainer.data.pairs import Pair
from trainer.schedule import Schedule

POLL_INTERVAL_S = 0.2


def failure_reason(exc: BaseException) -> str:
    """One line for a failed fit(): the first worker's own exception when Ray Train has one."""
    failures = getattr(exc, "worker_failures", None)
    if isinstance(failures, dict) and failures:
        rank, error = sorted(failures.items())[0]
        cause = getattr(error, "cause", None) or error
        return f"worker {rank}: {type(cause).__name__}: {_last_line(cause)}"
    return f"{type(exc).__name__}: {_last_line(exc)}"


def _last_line(exc: BaseException) -> str:
    """The last line of an exception's text, its runs of blanks (tabs from Ray) made one space."""
    lines = str(exc).strip().splitlines()
    return " ".join(lines[-1].split()) if lines else ""


class RunDriver:
    """Runs one resolved config to a summary; `run()` returns the process exit code."""

    def __init__(
        self,
        cfg: ServiceConfig,
        task: Task,
        eval_set: list[Pair],
        train_pairs: list[Pair] | None,
        console: Console | None = None,
    ):
        self.cfg = cfg
        self.task = task
        self.eval_set = eval_set
        self.train_pairs = train_pairs
        self.console = console or make_console(
            every_steps=cfg.run.log_every, interval_s=cfg.run.log_interval_s
        )
        self.loggers = open_loggers(
            cfg.logging, cfg.run.run_dir, str(cfg.run.name), cfg.model_dump(mode="json"), self.console.warning
        )
        self.recorder = RunRecorder(
            cfg.run.run_dir,
            str(cfg.run.name),
            Schedule.of(trainer_config(cfg)),
            self.console,
            sinks=[self.loggers],
            limits=cfg.pool,
        )
        self.signals = StopSignals()
        self._error: BaseException | None = None
        self._written = 0  # events drained from the control actor and written
        self._scorer: Any = None  # the reward the pool runs, also handed to the ranks (pool.placement)
        self._wait_policy_from: str | None = None  # why OpenMP waits as it does in the trainer workers
        self._worker_env: dict[str, str] = {}  # their environment on a cluster this process joined
        self._resizer: PoolResizer | None = None  # pool.autoscale's, once the pool is up

    def run(self) -> int:
        started_ray, pool, control = False, None, None
        status, error = "failed", None
        try:
            started_ray = init_ray(self.cfg, self.console)
            if started_ray or self.cfg.run.backend == "local":  # the trainer has this process's policy
                self._wait_policy_from = apply_wait_policy(self.cfg.scaling)
            else:
                self._worker_env, self._wait_policy_from = cluster_wait_policy(self.cfg.scaling)
            self.signals.install()  # after ray.init, which installs handlers of its own
            control = start_run_control(str(self.cfg.run.name))
            self._scorer = self.task.scorer()
            pool_cfg, sized_at = starting_pool(self.cfg.pool, checkpoint_root(self.cfg))
            if sized_at is not None:  # a resumed autoscaled pool: the ranks attach as many workers
                self.cfg = self.cfg.model_copy(update={"pool": pool_cfg})
                self.recorder.print(
                    f"[pool] {pool_cfg.num_workers} reward workers: the pool's size at step {sized_at}"
                )
            if self._scorer is not None:
                pool = RewardPool.create(self._scorer, self.cfg.pool, run_id=str(self.cfg.run.name))
                if (autoscale := self.cfg.pool.autoscale) is not None:
                    self._resizer = PoolResizer(
                        pool.workers, control, autoscale, self.recorder.total_steps, self.recorder.print,
                        demand=cluster_demand(self.cfg.scaling, self.cfg.pool),
                    )  # fmt: skip
            elif (episodes := self.task.episode_server()) is not None:  # an environment's, on the pool
                pool = WorkerPool.create(episodes, self.cfg.pool, run_id=str(self.cfg.run.name))
            status, error = self._train(control)
            if status in ("succeeded", "stopped") and self.cfg.model.source == "hf":
                self._export()
        except KeyboardInterrupt:  # a second Ctrl-C: end now, without waiting for a checkpoint
            status, error = "stopped", None
            self.recorder.print("[train] interrupted again: stopping without a final checkpoint")
        except Exception as exc:  # anything before or around fit(): the run failed, say why in one line
            status, error = "failed", failure_reason(exc)
        finally:
            self.signals.restore()
            if control is not None:
                self._drain(control)
            if self._resizer is not None:
                self._resizer.close()
            summary = self.recorder.finish(
                status, error or (self.recorder.error if status == "failed" else None), self._reports
            )
            self.loggers.finish(summary)
            self.console.close()
            _shutdown(pool, control)
        return 0 if status in ("succeeded", "stopped") else 1

    def _train(self, control: Any) -> tuple[str, str | None]:
        if self.signals.reason:  # asked to stop while Ray and the pool were starting
            return "stopped", None
        refs = ray.put(self.train_pairs) if self.train_pairs is not None else None
        spec = LoopSpec(
            trainer=trainer_config(self.cfg),
            task=self.task,
            pool=self.cfg.pool,
            run_id=str(self.cfg.run.name),
            eval_pairs=self.eval_set,
            eval_samples=self.cfg.run.eval_samples,
            train_pairs=refs,
            checkpoint_dir=str(checkpoint_root(self.cfg)),
            scorer=self._scorer,
            reward_token_ids=bool(self._scorer is not None and self._scorer.takes_token_ids),
            prompt_format=prompt_format(self.cfg),
            torch_threads=self.cfg.scaling.torch_threads,
            sampling_threads=self.cfg.scaling.sampling_threads,
            omp_wait_policy_from=self._wait_policy_from,
            rollouts_every=self.cfg.logging.rollouts_every,
            rollout_groups=self.cfg.logging.rollout_groups,
            strategy=strategy_config(self.cfg),
        )
        trainer = build_run(self.cfg, spec, control, self.console, self._worker_env)
        thread = threading.Thread(target=self._fit, args=(trainer,), name="ray-train-fit", daemon=True)
        thread.start()
        threading.Thread(target=_load_plotting, name="load-plotting", daemon=True).start()
        stop_sent = False
        while thread.is_alive():
            thread.join(POLL_INTERVAL_S)
            if self.signals.reason and not stop_sent:
                control.request_stop.remote(self.signals.reason)
                self.recorder.print(f"[train] {self.signals.reason}: stopping after the current step")
                stop_sent = True
            self._drain(control)
        self._drain(control)
        if self._error is not None:
            return "failed", self.recorder.error or self._failure_reason(self._error)
        if self.recorder.error:  # the workers ended the run by a rule (the reward error rate) and returned
            return "failed", self.recorder.error
        if self.recorder.last_step >= self.recorder.total_steps:
            return "succeeded", None
        return ("stopped", None) if stop_sent else ("failed", "the workers returned before the last step")

    def _export(self) -> None:
        """`export/` in the run directory: the final checkpoint as a transformers model."""
        from service.export import export_finished_run

        path = export_finished_run(str(self.cfg.run.run_dir))
        self.recorder.print(f"[export] {path} (AutoModelForCausalLM.from_pretrained loads it)")

    def _failure_reason(self, exc: BaseException) -> str:
        """Why fit() failed; a failure of the checkpoint storage outside the workers (Ray Train's
        controller writing its own records there) is named as one, like a worker's write failure."""
        reason, root = failure_reason(exc), str(checkpoint_root(self.cfg))
        if root not in reason:
            return reason
        last = self.recorder.last_checkpoint
        return f"{CheckpointWriteError.__name__}: " + write_failure_message("checkpoints", root, reason, last)

    def _fit(self, trainer: Any) -> None:
        try:
            trainer.fit()
        except BaseException as exc:  # reported by the main thread
            self._error = exc

    def _drain(self, control: Any) -> None:
        try:
            events = ray.get(control.drain.remote(), timeout=30)
        except Exception as exc:  # the control actor is gone: nothing more will arrive
            self.recorder.warn(f"cannot read the run's records: {type(exc).__name__}: {exc}")
            return
        for kind, record in events:
            self.recorder.handle(kind, record)
            if kind == STEP and self._resizer is not None:
                self._resizer.observe(record)
        if events:
            self._written += len(events)
            control.mark_written.remote(self._written)  # a checkpoint waits for this

    def _reports(self) -> list[str]:
        """Draw the run's reports; the names of those written (a missing one is a warning)."""
        written = []
        for draw in (write_report, write_html_report):
            try:
                written.append(draw(self.recorder.run_dir, title=f"{self.cfg.run.name}").name)
            except Exception as exc:  # a missing report must not hide the run's outcome
                self.console.warning(f"{draw.__name__} failed: {type(exc).__name__}: {exc}")
        return written


def _load_plotting() -> None:
    try:
        load_plotting()
    except Exception:  # the report at the end imports it again and warns that it could not be drawn
        pass


def _shutdown(pool: RewardPool | WorkerPool | None, control: Any) -> None:
    if pool is not None:
        pool.shutdown()
    if control is not None:
        try:
            ray.kill(control)
        except Exception:  # already gone with its job
            pass
    # The Ray this process started stops; a joined cluster is left now rather than at interpreter
    # exit, which takes about 0.5 s longer.
    if ray.is_initialized():
        ray.shutdown()
