"""Sampling apart from the trainer, steps ahead (`trainer.rollouts_apart`), with a sampler in this
process: at max_staleness 0 it trains as the trainer's own sampler does; at 1 each batch is sampled
by the previous step's weights, the loss's proximal log-probs are the current step's and its
importance weights the clamped ratio; a batch past the bound is never trained on; a checkpoint with
a batch on its way resumes exactly; a sampler that kept older weights stops the run."""

from __future__ import annotations

import copy

import pytest
import torch

import trainer.grpo.update as update_module
from tests.trainer.apart_sampler import InProcessApart, StaleCopy
from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, char_match
from trainer.config import TrainerConfig
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.rollouts_apart import WeightsMismatch
from trainer.sampling.logprobs import completion_logprobs

STEPS = [PAIRS, PAIRS[::-1], PAIRS[1:] + PAIRS[:1], PAIRS[2:] + PAIRS[:2], PAIRS[3:] + PAIRS[:3]]
TIMES = ("step_time_s", "sample_s", "ref_s", "reward_wait_s", "update_s", "completions_per_s")


def _cfg(staleness: int = 0, placement: str = "actors", **grpo) -> TrainerConfig:
    loss = {"policy_loss": "tis"} if staleness else {}
    return TrainerConfig.model_validate(
        {
            "seed": 0,
            "sampling": {
                "group_size": 4,
                "max_new_tokens": 6,
                "prompts_per_microbatch": 2,
                "placement": placement,
            },
            "grpo": {"prompts_per_step": 4, "steps": len(STEPS), "max_staleness": staleness, **loss, **grpo},
            "optim": {"lr": 1e-2},
            "precision": {"dtype": "fp32"},
        }
    )


def _apart(cfg: TrainerConfig, sampler=None, versioned=None) -> tuple[Trainer, InProcessApart]:
    trainer = Trainer(cfg, CHESS_TOKENIZER)
    apart = InProcessApart(trainer, char_match, **({"versioned": versioned} if versioned else {}))
    trainer.sample_apart(apart).plan(lambda t: STEPS[t], len(STEPS))
    return trainer, apart


def _steps(trainer: Trainer, steps: range) -> list[dict]:
    return [trainer.grpo_step(STEPS[t], InlineRewards(char_match)) for t in steps]


def _results(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMES}


def test_at_staleness_0_samples_apart_train_as_the_trainers_own():
    ours = Trainer(_cfg(placement="trainer"), CHESS_TOKENIZER)
    theirs, apart = _apart(_cfg())
    mine, other = _steps(ours, range(3)), _steps(theirs, range(3))
    assert [_results(m) for m in mine] == [_results(m) for m in other]
    assert [m["policy_version"] for m in other] == [0.0, 1.0, 2.0] and {m["staleness"] for m in other} == {
        0.0
    }
    assert [(r.step, r.version) for r in apart.requests] == [(0, 0), (1, 1), (2, 2)]
    for a, b in zip(ours.model.state_dict().values(), theirs.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert apart.released == [0, 1]  # each version dropped once no batch needs it
    assert theirs.state_dict().keys() == ours.state_dict().keys()  # nothing on its way: nothing more kept


@pytest.fixture
def seen_losses(monkeypatch):
    """Every micro-batch's loss inputs and terms, as the update computed them."""
    seen, real_lookup = [], update_module.get_policy_loss

    def spying(name):
        real = real_lookup(name)

        def loss(inputs, cfg):
            terms = real(inputs, cfg)
            seen.append((inputs, terms))
            return terms

        return loss

    monkeypatch.setattr(update_module, "get_policy_loss", spying)
    return seen


def test_at_staleness_1_the_previous_steps_weights_sample_and_the_loss_corrects_for_them(seen_losses):
    trainer, apart = _apart(_cfg(staleness=1, zero_var_groups="keep"))  # every row in the policy term
    saved = {0: copy.deepcopy(trainer.model.state_dict())}  # version v: the weights after v steps
    records, losses = [], []
    for t in range(3):
        records.append(trainer.grpo_step(STEPS[t], InlineRewards(char_match)))
        losses.append(seen_losses[-2:])  # the step's two micro-batches (one epoch, one mini-batch)
        saved[t + 1] = copy.deepcopy(trainer.model.state_dict())
    assert [(r.step, r.version) for r in apart.requests] == [(0, 0), (1, 0), (2, 1), (3, 2)]
    assert [(m["policy_version"], m["staleness"]) for m in records] == [(0.0, 0.0), (0.0, 1.0), (1.0, 1.0)]
    probe = Trainer(_cfg(staleness=1), CHESS_TOKENIZER)
    for t in (1, 2):  # step t trains the weights of version t on a batch sampled by version t - 1
        for (inputs, terms), rollout in zip(losses[t], apart.received[t].rollouts, strict=True):
            mask = inputs.mask
            assert torch.equal(inputs.sampler_logprobs, rollout.old_logprobs)
            probe.model.load_state_dict(saved[t - 1])
            behaviour = completion_logprobs(probe.model, rollout, 1.0, entropy=False)[0]
            probe.model.load_state_dict(saved[t])
            proximal = completion_logprobs(probe.model, rollout, 1.0, entropy=False)[0]
            assert torch.allclose(inputs.sampler_logprobs[mask], behaviour[mask], atol=1e-5)
            assert torch.allclose(inputs.old_logprobs[mask], proximal[mask], atol=1e-5)
            assert (inputs.sampler_logprobs[mask] - proximal[mask]).abs().max() > 1e-3  # the weights moved
            ratio = torch.exp(inputs.old_logprobs - inputs.sampler_logprobs)
            assert torch.equal(terms.is_weights, torch.clamp(ratio, max=2.0))
            assert torch.equal(terms.is_clipped, mask & (ratio > 2.0))
    weights = torch.cat([terms.is_weights[inputs.mask] for inputs, terms in losses[2]])
    assert records[2]["is_weight_mean"] == pytest.approx(float(weights.mean()), rel=1e-5)
    assert records[2]["is_weight_max"] == pytest.approx(float(weights.max()), rel=1e-5)
    cut = sum(int(terms.is_clipped.sum()) for _, terms in losses[2])
    assert records[2]["is_clip_frac"] == pytest.approx(cut / weights.numel())


def test_a_loss_without_importance_weights_records_weights_of_1():
    m = Trainer(_cfg(placement="trainer"), CHESS_TOKENIZER).grpo_step(PAIRS, InlineRewards(char_match))
    assert (m["is_weight_mean"], m["is_weight_max"], m["is_clip_frac"]) == (1.0, 1.0, 0.0)
    assert (m["policy_version"], m["staleness"]) == (0.0, 0.0)


def test_a_checkpoint_with_a_batch_on_its_way_resumes_exactly():
    straight, _ = _apart(_cfg(staleness=1))
    whole = _steps(straight, range(4))
    first, _ = _apart(_cfg(staleness=1))
    _steps(first, range(2))
    state = copy.deepcopy(first.state_dict())
    assert state["sampling"]["in_flight"] == [[2, 1]] and list(state["sampling"]["weights"]) == [1]
    resumed, apart = _apart(_cfg(staleness=1))
    resumed.load_state_dict(state)
    rest = _steps(resumed, range(2, 4))
    assert [(r.step, r.version) for r in apart.requests] == [(2, 1), (3, 2), (4, 3)]  # step 2 again, under 1
    assert [_results(m) for m in rest] == [_results(m) for m in whole[2:]]
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_batch_older_than_the_bound_is_never_trained_on():
    trainer, apart = _apart(_cfg(staleness=1))
    _steps(trainer, range(2))
    state = copy.deepcopy(trainer.state_dict())
    state["sampling"]["in_flight"] = [[2, 0]]  # step 2's batch under version 0: two versions behind
    state["sampling"]["weights"] = {0: apart.versioned.versions.get(0) or _version_0_weights()}
    later, apart = _apart(_cfg(staleness=1))
    later.load_state_dict(state)
    m = later.grpo_step(STEPS[2], InlineRewards(char_match))
    assert [(r.step, r.version) for r in apart.requests] == [(2, 0), (3, 2), (2, 2)]
    assert (m["policy_version"], m["staleness"]) == (2.0, 0.0)  # sampled again, under the current weights


def _version_0_weights():
    return Trainer(_cfg(staleness=1), CHESS_TOKENIZER).published_weights()


def test_a_sampler_that_kept_older_weights_stops_the_run_in_one_line():
    trainer, _ = _apart(_cfg(), versioned=StaleCopy)
    _steps(trainer, range(1))  # version 0 reaches its policy
    with pytest.raises(WeightsMismatch) as caught:
        _steps(trainer, range(1, 2))
    message = str(caught.value)
    assert message.startswith("sampler weights mismatch at GRPO step 2: the batch was sampled with weights")
    assert "policy version 1 was published as" in message and "\n" not in message


def test_a_resume_without_the_samplers_it_needs_is_refused():
    first, _ = _apart(_cfg(staleness=1))
    _steps(first, range(1))
    plain = Trainer(_cfg(placement="trainer"), CHESS_TOKENIZER)
    with pytest.raises(ValueError, match="resume it with sampling.placement=actors"):
        plain.load_state_dict(first.state_dict())
