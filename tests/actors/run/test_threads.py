"""A trainer worker's threads: torch's count and the OpenMP wait policy's environment."""

import pytest
import torch

from actors.run.omp_env import wait_policy_env
from actors.run.threads import (
    SMALL_DECODE_FLOP,
    apply_threads,
    choose_sampling_threads,
    decode_step_flop,
    default_threads,
    thread_candidates,
    usable_cores,
)
from service.config import ScalingConfig
from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.engine import Trainer
from trainer.policy.char_tokenizer import CharTokenizer


def test_wait_policies():
    assert wait_policy_env("passive") == {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
    assert wait_policy_env("active") == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert wait_policy_env("inherit") == {}
    with pytest.raises(ValueError, match="omp_wait_policy"):
        wait_policy_env("spin")
    assert ScalingConfig().omp_wait_policy == "auto" and ScalingConfig().torch_threads is None


def test_threads_default_to_the_cores_shared_among_the_node_workers():
    before = torch.get_num_threads()
    try:
        assert default_threads(1) == usable_cores()
        assert default_threads(10_000) == 1
        got = apply_threads(None, 1)
        assert got["torch_threads"] == torch.get_num_threads() == usable_cores()
        assert apply_threads(1, 1)["torch_threads"] == torch.get_num_threads() == 1
        assert "OMP_WAIT_POLICY" in got
    finally:
        torch.set_num_threads(before)


def test_decoding_is_timed_with_one_two_four_and_all_threads():
    assert thread_candidates(1) == [1]
    assert thread_candidates(2) == [1, 2]
    assert thread_candidates(6) == [1, 2, 4, 6]
    assert thread_candidates(8) == [1, 2, 4, 8]


def _trainer(**sampling) -> Trainer:
    cfg = {"sampling": {"group_size": 2, "max_new_tokens": 4, "prompts_per_microbatch": 2, **sampling}}
    return Trainer(TrainerConfig.model_validate(cfg), CharTokenizer(CHESS_ALPHABET))


def test_sampling_threads_are_set_timed_or_left_as_they_are():
    trainer = _trainer()
    before = torch.get_num_threads()
    try:
        assert choose_sampling_threads(trainer, 3, "e2e4") == {
            "sampling_threads": 3,
            "sampling_threads_from": "scaling.sampling_threads",
        }
        assert trainer.sampler.threads == 3
        torch.set_num_threads(1)
        trainer.sampler.threads = None
        for setting in (None, "auto"):
            got = choose_sampling_threads(trainer, setting, "e2e4")
            assert got == {"sampling_threads": 1, "sampling_threads_from": "torch_threads (one torch thread)"}
            assert trainer.sampler.threads is None
        torch.set_num_threads(2)
        got = choose_sampling_threads(trainer, "auto", "e2e4")
        assert got["sampling_threads_from"] == "timed at start (auto)" and got["sampling_threads"] in (1, 2)
        assert trainer.sampler.threads == got["sampling_threads"]
        assert str(got["sampling_threads"]) in got["sampling_threads_ms_per_token"]
        assert set(got["sampling_threads_ms_per_token"]) <= {"1", "2"}
        assert torch.get_num_threads() == 2  # timing restores the process's count
        with pytest.raises(ValueError, match="auto"):
            choose_sampling_threads(trainer, "auto", None)
    finally:
        torch.set_num_threads(before)


def test_the_default_rule_gives_one_thread_to_a_small_decode_step_under_the_passive_policy(monkeypatch):
    before = torch.get_num_threads()
    small, wide = (
        _trainer(group_size=8, prompts_per_microbatch=8),
        _trainer(group_size=64, prompts_per_microbatch=64),
    )
    assert decode_step_flop(small) < SMALL_DECODE_FLOP < decode_step_flop(wide)  # the same model, more rows
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
        got = choose_sampling_threads(small, None, None)
        assert got["sampling_threads"] == small.sampler.threads == 1
        assert got["sampling_threads_from"].startswith("rule: decode step")
        got = choose_sampling_threads(wide, None, None)
        assert got["sampling_threads"] == 2 and wide.sampler.threads is None
        monkeypatch.delenv("OMP_WAIT_POLICY")
        small.sampler.threads = None
        got = choose_sampling_threads(small, None, None)  # spinning threads wake for free
        assert got == {
            "sampling_threads": 2,
            "sampling_threads_from": "torch_threads (rule: OpenMP threads not passive)",
        }
        assert small.sampler.threads is None
    finally:
        torch.set_num_threads(before)
