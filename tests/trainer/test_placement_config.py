"""The keys of sampling beside the trainers: `sampling.placement`, `sampling.actors`,
`grpo.max_staleness`; what they refuse, each in one line naming the key."""

import pytest
from pydantic import ValidationError

from service.config_keys import describe_error
from trainer.config import CORRECTED_LOSSES, TrainerConfig


def _error(data: dict) -> str:
    with pytest.raises(ValidationError) as caught:
        TrainerConfig.model_validate(data)
    message = describe_error(TrainerConfig, caught.value.errors()[0])
    assert "\n" not in message
    return message


def test_the_defaults_sample_in_the_trainer_synchronously():
    cfg = TrainerConfig()
    assert cfg.sampling.placement == "trainer" and cfg.grpo.max_staleness == 0
    assert (
        cfg.sampling.actors.num,
        cfg.sampling.actors.cpus_per_actor,
        cfg.sampling.actors.gpus_per_actor,
    ) == (1, 1.0, 0.0)


@pytest.mark.parametrize("loss", ["vanilla", "dual_clip", "gspo", "gspo+dual_clip"])
def test_a_stale_batch_needs_an_importance_corrected_loss(loss):
    grpo = {"max_staleness": 1, "policy_loss": loss, **({"dual_clip": 3.0} if "dual" in loss else {})}
    message = _error({"sampling": {"placement": "actors"}, "grpo": grpo})
    assert message.startswith("grpo: max_staleness=1 trains on batches sampled by older weights")
    assert f"got {loss!r}" in message and ", ".join(CORRECTED_LOSSES) in message


@pytest.mark.parametrize("loss", CORRECTED_LOSSES)
def test_every_corrected_loss_is_allowed_with_cap_2_by_default(loss):
    grpo = {"max_staleness": 2, "policy_loss": loss, **({"dual_clip": 3.0} if "dual" in loss else {})}
    cfg = TrainerConfig.model_validate({"sampling": {"placement": "actors"}, "grpo": grpo})
    assert cfg.grpo.max_staleness == 2 and cfg.grpo.tis_cap == 2.0


def test_staleness_needs_sampler_actors():
    message = _error({"grpo": {"max_staleness": 1, "policy_loss": "tis"}})
    assert message.startswith("grpo.max_staleness=1 needs sampling.placement=actors")


def test_dynamic_sampling_refills_are_refused_with_sampler_actors():
    message = _error({"sampling": {"placement": "actors"}, "grpo": {"dynamic_sampling_tries": 2}})
    assert message.startswith("grpo.dynamic_sampling_tries needs sampling.placement=trainer")


@pytest.mark.parametrize(
    ("actors", "key"),
    [({"num": 0}, "sampling.actors.num"), ({"cpus_per_actor": 0}, "sampling.actors.cpus_per_actor"),
     ({"gpus_per_actor": -1}, "sampling.actors.gpus_per_actor")],
)  # fmt: skip
def test_actor_resources_are_checked(actors, key):
    assert _error({"sampling": {"placement": "actors", "actors": actors}}).startswith(key)
