"""Weights & Biases (`logging.wandb: {project, entity, mode}`; needs the `wandb` extra).

One W&B run per training run, its id the run id, its config the resolved config, its files under
`<run dir>/wandb/` (`mode: offline` writes only there; `wandb sync` uploads them later). W&B's
own console capture and banners are off: the run's console stays ours.
A resumed run continues the same W&B run; W&B keeps the first value of a step it already has,
so points logged past the checkpoint before an interruption are not replaced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from service.loggers.rollout_table import ROLLOUT_TAG, columns, table_rows
from service.loggers.scalars import scalars


def wandb_module():
    try:
        import wandb
    except ImportError as exc:
        raise ImportError(f"W&B is not installed ({exc}); pip install -e '.[wandb]'") from None
    return wandb


def wandb_run_id(run_id: str) -> str:
    """W&B run ids take letters, digits, `-` and `_`."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", run_id)


class WandbLogger:
    name = "wandb"

    def __init__(self, settings: Any, run_dir: str | Path, run_id: str, config: Mapping[str, Any]):
        self._wandb = wandb_module()
        self._run = self._wandb.init(
            project=settings.project,
            entity=settings.entity,
            mode=settings.mode,
            dir=str(run_dir),
            name=run_id,
            id=wandb_run_id(run_id),
            resume="allow",
            config=dict(config),
            settings=self._wandb.Settings(
                silent=True,
                console="off",
                disable_git=True,
                x_disable_stats=True,
                x_disable_machine_info=True,
            ),
        )

    def start(self, from_step: int | None) -> None:
        """Nothing to reopen: W&B keeps its step counter."""

    def step(self, record: Mapping[str, Any]) -> None:
        self._run.log(scalars(record, "step"), step=int(record["step"]))

    def evaluation(self, record: Mapping[str, Any]) -> None:
        self._run.log(scalars(record, "eval"), step=int(record["step"]))

    def rollouts(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        table = self._wandb.Table(columns=columns(rows), data=table_rows(rows))
        self._run.log({ROLLOUT_TAG: table}, step=step)

    def finish(self, summary: Mapping[str, Any]) -> None:
        for key in ("status", "steps", "wall_time_s"):
            self._run.summary[key] = summary.get(key)
        for key, value in (summary.get("final_eval") or {}).items():
            self._run.summary[f"final_eval/{key}"] = value
        self.close()

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
