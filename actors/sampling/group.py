"""One trainer rank's sampler actors, behind the trainer's `SamplerApart` seam.

    group = SamplerGroup.create(spec, SamplerActorsConfig(num=2), run_id="run-1", rank=0)
    digest = group.publish(version, weights)     # one ray.put, every actor loads it
    group.request(StepRequest(step, version, pairs, first_index))   # returns at once
    sampled = group.receive(step)                # completions, sampler log-probs, rewards, digest

A step's share is cut at micro-batch boundaries (`sampling.prompts_per_microbatch`) into one
contiguous part per actor, so each micro-batch decodes with the same rows and shapes as the
trainer's own sampler would. The weights of each published version stay in the object store until
released, so an actor that dies is replaced by a fresh one loaded with every version still in use,
and its parts (this step's and those requested ahead) are sampled again under the same weights and
noise keys: the same completions, the same rewards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError
from torch import Tensor

from actors.sampling.spec import SamplerSpec
from actors.sampling.worker import SamplerWorker
from trainer.config import SamplerActorsConfig
from trainer.grpo.reward_source import Rewards
from trainer.sampling.sampler_seam import SampledStep, StepRequest
from trainer.sampling.weights_digest import weights_digest

LOST = (RayActorError, ActorDiedError, ActorUnavailableError)
MAX_REPLACEMENTS_PER_STEP = 3  # an actor that keeps dying on the same part ends the run
MAX_REASONS = 3


class SamplerUnavailable(RuntimeError):
    """The sampler actors could not start, or kept dying."""


@dataclass
class _Part:
    """A contiguous piece of a step's share, on one actor."""

    slot: int  # the actor's index in the group
    generation: int  # the slot's actor it was sent to (a replacement has a newer one)
    request: StepRequest
    result: Any  # ObjectRef of its SampledStep


class SamplerGroup:
    """A rank's sampler actors; implements `trainer.sampling.sampler_seam.SamplerApart`."""

    def __init__(
        self,
        spec: SamplerSpec,
        cfg: SamplerActorsConfig,
        *,
        name_prefix: str,
        worker_class: type[SamplerWorker] = SamplerWorker,
        start_timeout_s: float = 600.0,
    ) -> None:
        """Prefer `create`."""
        self.spec, self.cfg, self.name_prefix = spec, cfg, name_prefix
        self.worker_class = worker_class
        self.start_timeout_s = start_timeout_s
        self.actors: list[Any] = []
        self.generations: list[int] = []
        self.pids: list[int] = []
        self.weights: dict[int, Any] = {}  # version -> ObjectRef of its weights, until released
        self.pending: dict[int, list[_Part]] = {}
        self.replacements = 0

    @classmethod
    def create(
        cls,
        spec: SamplerSpec,
        cfg: SamplerActorsConfig,
        *,
        run_id: str,
        rank: int = 0,
        worker_class: type[SamplerWorker] = SamplerWorker,
    ) -> SamplerGroup:
        """Start `cfg.num` named actors (`grpo-sampler-<run id>-r<rank>-<i>`) and wait until they are built."""
        group = cls(spec, cfg, name_prefix=f"grpo-sampler-{run_id}-r{rank}", worker_class=worker_class)
        try:
            handles = [group._start(i, 0) for i in range(cfg.num)]
            group.actors, group.generations = handles, [0] * cfg.num
            group.pids = group._wait_ready(handles)
        except BaseException:
            group.shutdown()
            raise
        return group

    # ----------------------------------------------------------------- SamplerApart
    def publish(self, version: int, weights: Mapping[str, Tensor]) -> str:
        ref = ray.put(dict(weights))
        self.weights[version] = ref
        self._get([actor.load.remote(version, ref) for actor in self.actors])
        return weights_digest(weights)

    def release(self, version: int) -> None:
        self.weights.pop(version, None)
        for actor in self.actors:
            actor.release.remote(version)  # fire and forget: calls to an actor keep their order

    def request(self, request: StepRequest) -> None:
        parts = []
        for slot, (offset, pairs) in enumerate(self._split(request.pairs)):
            if not pairs:  # fewer micro-batches than actors
                continue
            part = request._replace(pairs=pairs, first_index=request.first_index + offset)
            parts.append(_Part(slot, self.generations[slot], part, self.actors[slot].sample.remote(part)))
        self.pending[request.step] = parts

    def receive(self, step: int) -> SampledStep:
        parts = self.pending.pop(step)
        results = self._results(parts)
        return _combined(step, parts[0].request.version, results)

    # ----------------------------------------------------------------- the actors
    def shutdown(self) -> None:
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # already gone
                pass
        self.actors, self.weights, self.pending = [], {}, {}

    def actor_pids(self) -> list[int]:
        """Each actor's process id (a replacement's once it is built)."""
        return list(self.pids)

    def _start(self, slot: int, generation: int) -> Any:
        name = f"{self.name_prefix}-{slot}" + (f"-g{generation}" if generation else "")
        options: dict[str, Any] = {"name": name, "num_cpus": self.cfg.cpus_per_actor, "max_restarts": 0}
        if self.cfg.gpus_per_actor:
            options["num_gpus"] = self.cfg.gpus_per_actor
        return ray.remote(self.worker_class).options(**options).remote(self.spec)

    def _wait_ready(self, handles: Sequence[Any]) -> list[int]:
        try:
            return ray.get([h.ready.remote() for h in handles], timeout=self.start_timeout_s)
        except GetTimeoutError as exc:
            raise SamplerUnavailable(
                f"the sampler actors did not start within {self.start_timeout_s:g}s: the cluster lacks "
                f"{self.cfg.cpus_per_actor:g} CPU / {self.cfg.gpus_per_actor:g} GPU for each of "
                f"{len(handles)} (sampling.actors)"
            ) from exc

    def _replace(self, slot: int) -> None:
        """A fresh actor in `slot`, loaded with every version still in use."""
        try:
            ray.kill(self.actors[slot])
        except Exception:  # already gone
            pass
        generation = self.generations[slot] + 1
        actor = self._start(slot, generation)
        self.pids[slot] = self._wait_ready([actor])[0]
        self._get([actor.load.remote(version, ref) for version, ref in sorted(self.weights.items())])
        self.actors[slot], self.generations[slot] = actor, generation
        self.replacements += 1

    def _results(self, parts: list[_Part]) -> list[SampledStep]:
        """Each part's result; a part whose actor died is sampled again on its replacement."""
        try:
            return ray.get([part.result for part in parts])
        except LOST:
            pass
        results: list[SampledStep | None] = [None] * len(parts)
        tries = 0
        while True:
            for i, part in enumerate(parts):
                if results[i] is None:
                    try:
                        results[i] = ray.get(part.result)
                    except LOST:
                        if self.generations[part.slot] == part.generation:  # its actor, not replaced yet
                            self._replace(part.slot)
                        parts[i] = self._resend(part)
            if all(r is not None for r in results):
                return results  # type: ignore[return-value]
            tries += 1
            if tries > MAX_REPLACEMENTS_PER_STEP:
                raise SamplerUnavailable(
                    f"sampler actors died {tries} times sampling step {parts[0].request.step + 1}"
                )

    def _resend(self, part: _Part) -> _Part:
        slot = part.slot
        return _Part(
            slot, self.generations[slot], part.request, self.actors[slot].sample.remote(part.request)
        )

    def _get(self, refs: list[Any]) -> list[Any]:
        """Wait for calls to every actor; an actor lost meanwhile is replaced (the call is a load)."""
        try:
            return ray.get(refs)
        except LOST:
            for slot, actor in enumerate(list(self.actors)):
                if not _alive(actor):
                    self._replace(slot)
            return []

    def _split(self, pairs: Sequence[Any]) -> list[tuple[int, list[Any]]]:
        """(offset, pairs) of one contiguous part per actor, cut at micro-batch boundaries."""
        size = self.spec.trainer.sampling.prompts_per_microbatch
        batches = -(-len(pairs) // size)
        per_actor, extra = divmod(batches, len(self.actors))
        parts, start = [], 0
        for slot in range(len(self.actors)):
            count = (per_actor + (slot < extra)) * size
            parts.append((start, list(pairs[start : start + count])))
            start += count
        return parts


def _alive(actor: Any) -> bool:
    try:
        ray.get(actor.ready.remote(), timeout=60)
        return True
    except (*LOST, GetTimeoutError):
        return False


def _combined(step: int, version: int, results: Sequence[SampledStep]) -> SampledStep:
    """The parts of a step in order, as one; differing digests are all reported (never the published one)."""
    digests = sorted({r.digest for r in results})
    reasons = [reason for r in results for reason in r.failure_reasons][:MAX_REASONS]
    rollouts = [rollout for r in results for rollout in r.rollouts]
    rewards = Rewards.concat([r.rewards for r in results])
    return SampledStep(step, version, "+".join(digests), rollouts, rewards, reasons)
