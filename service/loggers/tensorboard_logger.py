"""TensorBoard event files in `<run dir>/tensorboard/` (`logging.tensorboard: true`).

Written with torch's SummaryWriter (needs the `tensorboard` extra). A resume reopens the writer
with `purge_step`, so TensorBoard hides the points logged past the checkpoint the run went
back to, as the records on disk drop them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from service.loggers.rollout_table import ROLLOUT_TAG, markdown
from service.loggers.scalars import scalars

TENSORBOARD_DIR = "tensorboard"


def tensorboard_writer_class():
    """torch's SummaryWriter; ImportError naming the extra when TensorBoard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError(f"TensorBoard is not installed ({exc}); pip install -e '.[tensorboard]'") from None
    return SummaryWriter


class TensorBoardLogger:
    name = "tensorboard"

    def __init__(self, run_dir: str | Path):
        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self._writer_class = tensorboard_writer_class()
        self._writer: Any = None

    def start(self, from_step: int | None) -> None:
        self.close()
        purge = from_step + 1 if from_step else None
        self._writer = self._writer_class(log_dir=str(self.log_dir), purge_step=purge, flush_secs=5)

    def _writer_now(self) -> Any:
        if self._writer is None:
            self.start(None)
        return self._writer

    def step(self, record: Mapping[str, Any]) -> None:
        writer = self._writer_now()
        for name, value in scalars(record, "step").items():
            writer.add_scalar(name, value, global_step=int(record["step"]))

    def evaluation(self, record: Mapping[str, Any]) -> None:
        writer = self._writer_now()
        for name, value in scalars(record, "eval").items():
            writer.add_scalar(name, value, global_step=int(record["step"]))
        writer.flush()

    def rollouts(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        self._writer_now().add_text(ROLLOUT_TAG, markdown(rows), global_step=step)

    def finish(self, summary: Mapping[str, Any]) -> None:
        self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
