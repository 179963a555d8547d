"""The run context of a Ray Train worker (one DDP rank), and Ray Train's entry point.

Ray Train has set up torch.distributed (gloo on CPU, NCCL on GPU) before the loop starts; it
persists each reported checkpoint as `<storage_path>/<name>/step_<N>`, registers it and keeps the
newest `checkpoint.keep_last` (the driver's `CheckpointConfig(num_to_keep)`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import ray.train
import ray.train.torch
import torch

from actors.run.context import Restore
from actors.run.loop import WorkerLoop


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry point; config = {"spec": LoopSpec, "control": RunControl actor handle}."""
    WorkerLoop(config["spec"], config["control"], RayTrainContext()).run()


class RayTrainContext:
    """This worker's rank, world and device as Ray Train gives them; reports go to Ray Train."""

    def __init__(self) -> None:
        context = ray.train.get_context()
        self.rank: int = context.get_world_rank()
        self.world_size: int = context.get_world_size()
        self.local_world_size: int = context.get_local_world_size()
        self.device: torch.device = ray.train.torch.get_device()

    def report(
        self, metrics: dict[str, Any], checkpoint_dir: Path | None = None, name: str | None = None
    ) -> None:
        # Every rank reports (it is a barrier); only rank 0 hands over a checkpoint.
        if checkpoint_dir is None:
            ray.train.report(metrics)
            return
        ray.train.report(
            metrics,
            checkpoint=ray.train.Checkpoint.from_directory(str(checkpoint_dir)),
            checkpoint_dir_name=name,
        )

    def latest_checkpoint(self) -> Restore | None:
        """The checkpoint Ray Train registered last (on a restart or a driver's resume)."""
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return None
        # run.storage_path is a filesystem path (URIs are refused), so the checkpoint's own path is
        # readable here: what `as_directory()` yields for local storage, without a copy.
        path = Path(checkpoint.path)
        return Restore(path, path.name)

    def say(self, line: str) -> None:
        # Written to the stream, not print()ed: Ray Train patches print() in its workers to log
        # the line as well as print it, so the driver showed every such line twice.
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
