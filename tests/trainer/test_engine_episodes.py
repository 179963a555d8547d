"""A GRPO step and an evaluation whose samples are episodes (an environment task), in process."""

import torch

from rewards.env import LocalEpisodes
from rewards.env.guess import GuessNumber
from trainer.config import TrainerConfig
from trainer.data.pairs import EpisodePair
from trainer.engine import Trainer
from trainer.grpo.reward_source import Rewards
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
    # what each episode's episode_info() reported, as a mean: the guesses GuessNumber counted
    assert list(record["env_metrics"]) == ["guesses"] and 0.0 <= record["env_metrics"]["guesses"] <= 6.0


def test_an_evaluation_of_episodes_plays_one_greedy_episode_per_pair():
    trainer = _trainer()
    summary = trainer.evaluator.evaluate(_pairs(3), score_fn=None, n_samples=2)
    assert summary["count"] == 3 and summary["exact_match"] is None
    assert {"success_rate", "turns_mean", "env_errors", "env_step_s", "env_metrics"} <= summary.keys()
    assert [s["prompt"] for s in summary["samples"]] == ["guess 1-16\n"] * 2


def test_episode_metrics_are_means_per_key_over_the_episodes_that_reported_it():
    from types import SimpleNamespace

    from trainer.grpo.episode_rewards import episode_figures, episode_rewards

    def result(info):
        return SimpleNamespace(reward=1.0, usable=True, status="ok", turns=2, env_s=0.1, success=True,
                               episode_info=info)  # fmt: skip

    first = episode_rewards([result({"steps": 2, "solved": True, "note": "x"}), result(None)], 0.0)
    second = episode_rewards([result({"steps": 4, "ratio": float("nan")})], 0.0)
    figures = episode_figures(Rewards.concat([first, second]).stats)
    assert figures["env_metrics"] == {"steps": 3.0, "solved": 1.0}  # text and NaN are left out
    assert "env_metrics" not in episode_figures(episode_rewards([result(None)], 0.0).stats)


class GuessWithOwnAggregate(GuessNumber):
    """The guessing game with SkyRL's hook: a step's env_metrics are what it makes of the infos."""

    @staticmethod
    def aggregate_metrics(infos):
        guesses = [info["guesses"] for info in infos]
        return {"episodes": len(infos), "most_guesses": max(guesses), "kind": "text is left out"}


def test_an_environments_own_aggregate_makes_the_steps_and_the_evaluations_env_metrics():
    torch.manual_seed(0)
    cfg = _trainer().cfg
    host = LocalEpisodes(GuessWithOwnAggregate, max_turns=6)
    trainer = Trainer(cfg, CharTokenizer(GuessNumber.alphabet + "\n"), stop=["\n"], episodes=host)
    record = trainer.grpo_step(_pairs(4), rewards=None)
    assert set(record["env_metrics"]) == {"episodes", "most_guesses"}
    assert record["env_metrics"]["episodes"] == 16.0 and 0.0 <= record["env_metrics"]["most_guesses"] <= 6.0
    summary = trainer.evaluator.evaluate(_pairs(3), score_fn=None, n_samples=1)
    assert summary["env_metrics"]["episodes"] == 3.0


def test_an_aggregate_gets_every_ranks_infos_that_were_reported_and_its_failures_are_named():
    import numpy as np
    import pytest

    from rewards.env.check import play
    from trainer.grpo.episode_rewards import aggregated_env_metrics, episode_rewards

    reports = type("Reports", (GuessNumber,), {"episode_info": lambda self: {"g": np.int64(3)}})
    silent = type("Silent", (GuessNumber,), {"episode_info": lambda self: None})
    results = [play(env, {"secret": 5}, ["5"], max_turns=6, step_timeout_s=None) for env in (reports, silent)]
    mine = episode_rewards(results, 0.0).episode_infos
    assert mine == [{"g": 3}, None] and type(mine[0]["g"]) is int  # plain values: they cross ranks as JSON
    seen = []

    def keep(infos):
        seen.append(infos)
        return {"n": len(infos), "flag": True, "nan": float("nan"), "ratio": np.float32(0.5)}

    two_ranks = lambda mine: [mine, [{"g": 7}, None]]  # noqa: E731  (rank 1's share, one without info)
    out = aggregated_env_metrics(mine, keep, two_ranks)
    assert seen == [[{"g": 3}, {"g": 7}]]  # every rank's, in rank order, where an episode reported one
    assert out == {"n": 2.0, "flag": 1.0, "ratio": 0.5}  # finite numbers only, as the mean keeps
    with pytest.raises(RuntimeError, match="aggregate_metrics failed on 1 episode infos: KeyError"):
        aggregated_env_metrics([{"g": 1}], lambda infos: infos[0]["missing"])
    with pytest.raises(TypeError, match="returned list, not a dict"):
        aggregated_env_metrics([{"g": 1}], lambda infos: [1])
