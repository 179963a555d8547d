"""The run's loggers: TensorBoard and W&B, fed by the driver from the records it writes.

    loggers = open_loggers(cfg.logging, run_dir, run_id, config, warn)   # [] of them when off
    loggers.start(from_step); loggers.step(record); loggers.evaluation(record); loggers.finish(summary)

Both take exactly the rows of metrics.jsonl and eval.jsonl, named `train/`, `time/`, `pool/`,
`eval/` from `actors.metric_names`. A logger that raises is reported once as a warning and left
out from then on: a logging problem never ends a training run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from service.loggers.scalars import scalars
from service.loggers.tensorboard_logger import TENSORBOARD_DIR, TensorBoardLogger, tensorboard_writer_class
from service.loggers.wandb_logger import WandbLogger, wandb_module


def missing_extras(settings: Any) -> list[str]:
    """One message per logger the config turns on whose package is not installed."""
    problems = []
    if settings.tensorboard:
        try:
            tensorboard_writer_class()
        except ImportError as exc:
            problems.append(f"logging.tensorboard: {exc}")
    if settings.wandb is not None:
        try:
            wandb_module()
        except ImportError as exc:
            problems.append(f"logging.wandb: {exc}")
    return problems


class RunLoggers:
    """Every logger of the run behind one face; a failing one is dropped with one warning."""

    def __init__(self, loggers: list[Any], warn: Callable[[str], None]):
        self._loggers = list(loggers)
        self._warn = warn

    def __len__(self) -> int:
        return len(self._loggers)

    def _each(self, method: str, *args: Any) -> None:
        for logger in list(self._loggers):
            self._call(logger, method, *args)

    def _call(self, logger: Any, method: str, *args: Any) -> None:
        try:
            getattr(logger, method)(*args)
        except Exception as exc:  # the run goes on; the user learns the logger stopped
            self._loggers.remove(logger)
            self._warn(f"{logger.name} logging stopped: {type(exc).__name__}: {exc}")

    def start(self, from_step: int | None) -> None:
        self._each("start", from_step)

    def step(self, record: Mapping[str, Any]) -> None:
        self._each("step", record)

    def evaluation(self, record: Mapping[str, Any]) -> None:
        self._each("evaluation", record)

    def rollouts(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """Training completions, to the loggers that show tables (`logging.rollouts_every`)."""
        for logger in list(self._loggers):
            if hasattr(logger, "rollouts"):
                self._call(logger, "rollouts", step, rows)

    def finish(self, summary: Mapping[str, Any]) -> None:
        self._each("finish", summary)
        self._loggers.clear()


def open_loggers(
    settings: Any,
    run_dir: str | Path,
    run_id: str,
    config: Mapping[str, Any],
    warn: Callable[[str], None],
) -> RunLoggers:
    """The loggers `settings` (the config's `logging` section) turns on; one that cannot start is
    reported with `warn` and left out."""
    makers: list[tuple[str, Callable[[], Any]]] = []
    if settings.tensorboard:
        makers.append(("tensorboard", lambda: TensorBoardLogger(run_dir)))
    if settings.wandb is not None:
        makers.append(("wandb", lambda: WandbLogger(settings.wandb, run_dir, run_id, config)))
    loggers = []
    for name, make in makers:
        try:
            loggers.append(make())
        except Exception as exc:
            warn(f"{name} logging not started: {type(exc).__name__}: {exc}")
    return RunLoggers(loggers, warn)


__all__ = ["TENSORBOARD_DIR", "RunLoggers", "missing_extras", "open_loggers", "scalars"]
