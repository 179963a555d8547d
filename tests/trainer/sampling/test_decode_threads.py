"""Decoding's thread count: picked by timing with a margin, and the timing leaves sampling unchanged."""

from types import SimpleNamespace

import pytest
import torch

from trainer.config import SamplingConfig, TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
from trainer.engine import Trainer
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.sampling import decode_threads
from trainer.sampling.decode_threads import MARGIN, pick_threads, time_decode_threads


def test_fewer_threads_only_when_clearly_faster():
    assert pick_threads({1: 2.0, 2: 3.4}) == 1  # the passive wait policy on a small model
    assert pick_threads({1: 2.0, 2: 2.0 * MARGIN * 0.99}) == 2  # within the margin: the most threads
    assert pick_threads({1: 8.0, 2: 4.0, 4: 3.0}) == 4
    assert pick_threads({1: 8.0, 2: 2.0, 4: 3.0}) == 2
    assert pick_threads({2: 1.0}) == 2


def _trainer() -> Trainer:
    cfg = {"seed": 3, "sampling": {"group_size": 4, "max_new_tokens": 12, "prompts_per_microbatch": 2}}
    return Trainer(TrainerConfig.model_validate(cfg), CharTokenizer(CHESS_ALPHABET))


class _NoRewards:
    def submit(self, *args, **kwargs):
        return None


def test_timing_draws_no_random_numbers_and_restores_the_thread_count():
    pairs = generate_pairs(2, seed=4, min_plies=1, max_plies=3)
    timed, untimed = _trainer(), _trainer()
    before, rng = torch.get_num_threads(), torch.get_rng_state()
    chosen = timed.sampler.time_threads(pairs[0].prompt, [1, before])
    assert torch.get_num_threads() == before and torch.equal(torch.get_rng_state(), rng)
    assert chosen.threads in (1, before) and timed.sampler.threads == chosen.threads
    assert set(chosen.ms_per_token) == {1, before} and all(v > 0 for v in chosen.ms_per_token.values())
    timed.sampler.threads = untimed.sampler.threads = 1  # the same numerics for both
    a, _ = timed.rollouts.sample(pairs, _NoRewards())
    b, _ = untimed.rollouts.sample(pairs, _NoRewards())
    assert torch.equal(a[0].input_ids, b[0].input_ids) and torch.equal(a[0].old_logprobs, b[0].old_logprobs)


def test_bad_candidates_are_refused():
    trainer = _trainer()
    ids = trainer.tokenizer.encode_prompt("e2e4")
    with pytest.raises(ValueError, match="candidates"):
        time_decode_threads(trainer.policy, ids, trainer.cfg.sampling, [0, 2])
    with pytest.raises(ValueError, match="prompt"):
        time_decode_threads(trainer.policy, [], trainer.cfg.sampling, [1])


def _fake_decode(monkeypatch, seconds_by_threads: dict[int, float]) -> list[int]:
    """Decoding that takes a set time by thread count, on a clock of its own (a busy machine's
    sleeps overshoot by tens of milliseconds); returns the counts it was called with."""
    calls: list[int] = []
    clock = [0.0]

    def fake(policy, prompts, cfg, **kwargs):
        calls.append(torch.get_num_threads())
        clock[0] += seconds_by_threads[calls[-1]]

    monkeypatch.setattr(decode_threads, "generate", fake)
    monkeypatch.setattr(decode_threads, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    return calls


def test_a_wide_model_is_not_decoded_on_few_threads_just_to_time_it(monkeypatch):
    calls = _fake_decode(monkeypatch, {4: 0.02, 2: 0.05, 1: 0.15})  # each thread pays
    got = time_decode_threads(None, [1], SamplingConfig(max_new_tokens=4), [1, 2, 4])
    assert 1 not in calls and calls.count(2) == 1  # 2 threads: one untimed call, 2.5x slower: cut
    assert calls[0] == 4 and calls.count(4) == 5  # a warm-up, an untimed first call, 3 timed rounds
    assert got.threads == 4 and set(got.ms_per_token) == {4}


def test_a_small_model_under_the_passive_policy_takes_one_thread(monkeypatch):
    # waking threads costs more; 2 threads 1.5x one (inside decode_threads.SLOW = 2)
    calls = _fake_decode(monkeypatch, {4: 0.2, 2: 0.12, 1: 0.08})
    got = time_decode_threads(None, [1], SamplingConfig(max_new_tokens=4), [1, 2, 4])
    assert calls[:4] == [4, 4, 2, 1] and got.threads == 1 and set(got.ms_per_token) == {2, 1}
