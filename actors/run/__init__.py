"""One rank's run: the loop over its run context (Ray Train's or the local one), the run's control
actor, its metrics, its data.

    from actors.run import LoopSpec, train_loop_per_worker, start_run_control
    from actors.run import LocalContext, LocalRun  # run.backend: local, no Ray Train

Names are imported on first use, so the driver's record keeping can read the event kinds
without importing Ray Train.
"""

from __future__ import annotations

from actors.lazy import lazy_exports

_EXPORTS = {
    "LoopSpec": "actors.run.loop",
    "LocalRun": "actors.run.loop",
    "WorkerLoop": "actors.run.loop",
    "train_loop_per_worker": "actors.run.ray_context",
    "RayTrainContext": "actors.run.ray_context",
    "RunContext": "actors.run.context",
    "LocalContext": "actors.run.context",
    "Restore": "actors.run.context",
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
