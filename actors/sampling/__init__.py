"""Sampler actors: Ray actors that build the trainer's policy and sample each GRPO step's batch
beside the trainers (`sampling.placement: actors`), scoring it on the reward pool as they decode.

    group = SamplerGroup.create(spec, cfg.sampling.actors, run_id="run-1", rank=0)
    trainer.sample_apart(group)          # trainer.rollouts_apart over the group (SamplerApart)
    ...
    group.shutdown()

Names are imported on first use.
"""

from __future__ import annotations

from actors.lazy import lazy_exports

_EXPORTS = {
    "SamplerGroup": "actors.sampling.group",
    "SamplerSpec": "actors.sampling.spec",
    "sampler_spec": "actors.sampling.spec",
    "SamplerWorker": "actors.sampling.worker",
    "SamplerUnavailable": "actors.sampling.group",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
