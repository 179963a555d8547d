"""Per-row sampling noise: the right distribution, and tokens independent of micro-batch size and rank."""

import torch

from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, Pair
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.sampling.row_noise import gumbel_noise, row_keys
from trainer.sampling.sampler import sample_tokens

PROMPTS = [
    "e4",
    "d4",
    "c4",
    "Nf3",
    "g3",
    "b3",
    "f4",
    "a3",
    "e4 e5",
    "d4 d5",
    "c4 c5",
    "Nf3 Nf6",
    "h3",
    "a4",
    "b4",
    "Nc3",
]


def test_gumbel_max_samples_the_softmax():
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1])
    logits = probs.log().expand(20_000, 4)
    keys = row_keys(3, 0, 0, 2_500, 8, "cpu")
    tokens, _ = sample_tokens(logits, 1.0, None, False, None, gumbel_noise(keys, 0, 4))
    freq = torch.bincount(tokens, minlength=4).float() / 20_000
    assert torch.allclose(freq, probs, atol=0.012), freq  # 4 sigma of a binomial at n = 20,000
    again, _ = sample_tokens(logits, 1.0, None, False, None, gumbel_noise(keys, 1, 4))
    assert (again != tokens).float().mean() > 0.4  # another decoding step: other draws
    top2, _ = sample_tokens(logits, 1.0, 2, False, None, gumbel_noise(keys, 0, 4))
    assert set(top2.tolist()) == {0, 1}


def test_row_keys_are_distinct_and_depend_on_every_part():
    keys = row_keys(0, 5, 0, 16, 8, "cpu")
    assert keys.unique().numel() == 128
    assert torch.equal(row_keys(0, 5, 8, 8, 8, "cpu"), keys[64:])  # prompt 8 of the step, whatever the chunk
    for other in (row_keys(1, 5, 0, 16, 8, "cpu"), row_keys(0, 6, 0, 16, 8, "cpu")):
        assert not torch.equal(other, keys)


def _tokens(prompts_per_microbatch: int, first: int = 0, n: int = 16) -> list[list[int]]:
    cfg = TrainerConfig.model_validate(
        {
            "seed": 4,
            "sampling": {
                "group_size": 8,
                "max_new_tokens": 12,
                "prompts_per_microbatch": prompts_per_microbatch,
            },
            "grpo": {"prompts_per_step": 16},
        }
    )
    trainer = Trainer(cfg, CharTokenizer(CHESS_ALPHABET))
    pairs = [Pair(p, "x") for p in PROMPTS[first : first + n]]
    rewards = InlineRewards(lambda c, t: [0.0] * len(c))
    rollouts, _ = trainer.rollouts.sample(pairs, rewards, first_index=first)
    rows = []
    for r in rollouts:
        for ids, mask in zip(r.completion_ids.tolist(), r.completion_mask.tolist(), strict=True):
            rows.append([i for i, m in zip(ids, mask, strict=True) if m])
    return rows


def test_micro_batch_size_and_rank_share_do_not_change_the_samples():
    whole = _tokens(16)
    for size in (1, 3, 4):
        other = _tokens(size)
        same = sum(a == b for a, b in zip(whole, other, strict=True)) / len(whole)
        assert same >= 0.99, (size, same)
    # the second of two ranks samples prompts 8..15 of the step
    second = _tokens(4, first=8, n=8)
    assert sum(a == b for a, b in zip(whole[64:], second, strict=True)) / 64 >= 0.99
    assert len({tuple(r) for r in whole}) > 64  # the rows are not all alike


def test_noise_made_for_many_steps_at_once_equals_step_by_step():
    from trainer.sampling.row_noise import StepNoise

    keys = row_keys(3, 7, 0, 4, 5, "cpu")
    many = gumbel_noise(keys, torch.arange(10), 11)
    assert many.shape == (10, 20, 11)
    for t in range(10):
        assert torch.equal(many[t], gumbel_noise(keys, t, 11))
    for block_elements in (1, 20 * 11 * 3, 1 << 22):  # one step, 3 steps, every step per block
        noise = StepNoise(keys, 11, 10, max_elements=block_elements)
        assert all(torch.equal(noise(t), many[t]) for t in range(10))
