"""Rollouts sample through the Sampler seam: a sampler apart from the trainer, holding the same
weights, gives a step the same rows; the policy version keys the rows' noise."""

import copy

import pytest
import torch

from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, char_match, small_cfg
from trainer.data.pairs import FieldPair
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.rollouts import Rollouts
from trainer.sampling.in_process import InProcessSampler
from trainer.sampling.sampler_seam import Completions, PromptBatch


class Apart:
    """A sampler beside the trainer: its own copy of the weights, of the version it was sent, and
    what it was asked for."""

    def __init__(self, trainer: Trainer):
        cfg = trainer.cfg
        policy = copy.deepcopy(trainer.policy)
        self.inner = InProcessSampler(
            policy, cfg.sampling, trainer.sampling_precision, cfg.seed, trainer.device
        )
        self.version = trainer.grpo_steps
        self.episodes = None
        self.asked: list[tuple[list[str], int, int]] = []

    def sample(self, batch: PromptBatch, version: int) -> Completions:
        if version != self.version:
            raise ValueError(f"holds version {self.version}, asked for {version}")
        self.asked.append((list(batch.prompts), batch.first_index, version))
        return self.inner.sample(batch, version)

    def play(self, batches, version):
        return self.inner.play(batches, version)


def test_a_sampler_apart_from_the_trainer_gives_the_step_the_same_rows():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    trainer.grpo_step(PAIRS, InlineRewards(char_match))  # version 1: the weights have moved
    apart = Apart(trainer)
    ours_seen, theirs_seen = [], []

    def scorer(seen):
        return InlineRewards(
            lambda completions, targets: seen.extend(completions) or char_match(completions, targets)
        )

    ours, _ = trainer.rollouts.sample(PAIRS, scorer(ours_seen), first_index=4)
    rollouts = Rollouts(apart, trainer.cfg.sampling, trainer.progress)
    theirs, _ = rollouts.sample(PAIRS, scorer(theirs_seen), first_index=4)
    assert apart.asked == [(["e4", "d4"], 4, 1), (["c4", "Nf3"], 6, 1)]  # micro-batches of 2 prompts
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.completion_mask, b.completion_mask)
        assert torch.equal(a.old_logprobs, b.old_logprobs)
    assert ours_seen == theirs_seen and len(ours_seen) == 16


def test_the_policy_version_keys_the_rows_noise():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    batch = PromptBatch(["e4", "d4"], 0)
    first, again = trainer.sampler.sample(batch, 0), trainer.sampler.sample(batch, 0)
    other = trainer.sampler.sample(batch, 1)
    assert torch.equal(first.rollout.input_ids, again.rollout.input_ids)
    assert not torch.equal(first.rollout.input_ids, other.rollout.input_ids)
    assert len(first.texts) == 8 and first.token_ids is None  # 2 prompts x group_size 4


def test_a_prompt_batch_carries_each_pairs_fields_as_its_row():
    pairs = [FieldPair("p", "t", {"a": 1}), *PAIRS[:1]]
    assert PromptBatch.of(pairs, 3) == PromptBatch(["p", "e4"], 3, [{"a": 1}, {}])


def test_episodes_need_an_episode_host():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    with pytest.raises(ValueError, match="only for an environment task"):
        trainer.sampler.play([PromptBatch(["e4"], 0)], 0)
    with pytest.raises(ValueError, match="needs a reward source"):
        trainer.rollouts.sample(PAIRS, None)
