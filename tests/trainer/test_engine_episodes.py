"""A GRPO step and an evaluation whose samples are episodes (an environment task), in process."""

import torch

from rewards.env import LocalEpisodes
from rewards.env.guess import GuessNumber
from trainer.config import TrainerConfig
from trainer.data.pairs import EpisodePair
from trainer.engine import Trainer
from trainer.policy.char_tokenizer import CharTokenizer


def _trainer(**grpo) -> Trainer:
    cfg = TrainerConfig.model_validate(
        {
            "model": {"size": "custom", "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 64},
            "sampling": {"group_size": 4, "max_new_tokens": 40, "prompts_per_microbatch": 2},
            "grpo": {"steps": 2, "prompts_per_step": 4, **grpo},
        }
    )
    host = LocalEpisodes(GuessNumber, max_turns=6)
    return Trainer(cfg, CharTokenizer(GuessNumber.alphabet + "\n"), stop=["\n"], episodes=host)


def _pairs(n: int) -> list[EpisodePair]:
    return [EpisodePair("guess 1-16\n", None, GuessNumber.generate_row(i, 0)) for i in range(n)]


def test_a_grpo_step_of_episodes_reports_them_and_needs_no_reward_source():
    torch.manual_seed(0)
    trainer = _trainer()
    record = trainer.grpo_step(_pairs(4), rewards=None)
    assert record["completions"] == 16 and record["scorer_reward_items"] == 16
    assert record["turns_mean"] >= 0.0 and 0.0 <= record["success_rate"] <= 1.0  # 0: cut before a turn ended
    assert record["env_errors"] == 0.0 and record["env_step_s"] >= 0.0
    assert not any(k.startswith("scorer_env_") for k in record)  # the means stand for them


def test_an_evaluation_of_episodes_plays_one_greedy_episode_per_pair():
    trainer = _trainer()
    summary = trainer.evaluate(_pairs(3), score_fn=None, n_samples=2)
    assert summary["count"] == 3 and summary["exact_match"] is None
    assert {"success_rate", "turns_mean", "env_errors", "env_step_s"} <= summary.keys()
    assert [s["prompt"] for s in summary["samples"]] == ["guess 1-16\n"] * 2
