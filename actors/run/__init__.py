"""One rank's run under Ray Train: the worker loop, the run's control actor, its metrics, its data.

    from actors.run import LoopSpec, train_loop_per_worker, start_run_control

Names are imported on first use, so the driver's record keeping can read the event kinds
without importing Ray Train.
"""

from __future__ import annotations

from actors.lazy import lazy_exports

_EXPORTS = {
    "LoopSpec": "actors.run.loop",
    "train_loop_per_worker": "actors.run.loop",
    "RunControl": "actors.run.control",
    "start_run_control": "actors.run.control",
    "control_actor_name": "actors.run.control",
    "EVENT_KINDS": "actors.run.control",
    "RunMetrics": "actors.run.metrics",
    "METRIC_NAMES": "actors.run.metrics",
    "StepData": "actors.run.step_data",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
