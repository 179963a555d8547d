"""An environment's own `aggregate_metrics` (SkyRL's name): how its class says it, a SkyRL class
keeping SkyRL's default mean or not, and the trial before a run calling it as a step would."""

from __future__ import annotations

import pytest

from rewards.env.check import env_problem, try_environment
from rewards.env.guess import GuessNumber
from rewards.env.skyrl import wrap_skyrl


def _spread(infos):
    guesses = [info["guesses"] for info in infos]
    return {"episodes": len(infos), "most_guesses": max(guesses), "note": "text is left to the caller"}


class GuessWithSpread(GuessNumber):
    aggregate_metrics = staticmethod(_spread)


class GuessWithBrokenAggregate(GuessNumber):
    @staticmethod
    def aggregate_metrics(infos):
        return [info["guesses"] for info in infos]  # a list, not a dict


ROWS = [({"secret": 5, "tries": 3}, ["8", "9", "5"]), ({"secret": 2, "tries": 3}, ["2"])]


def test_an_environment_without_one_leaves_the_mean_and_the_trial_says_nothing_more():
    assert GuessNumber.aggregate_metrics is None
    trial = try_environment(GuessNumber, ROWS, max_turns=6)
    assert trial.aggregated is None and trial.aggregate_error is None and env_problem(trial) is None


def test_the_trial_calls_an_environments_own_aggregate_over_every_sample_episode():
    trial = try_environment(GuessWithSpread, ROWS, max_turns=6)
    assert trial.infos == [{"guesses": 3}, {"guesses": 3}, {"guesses": 1}, {"guesses": 1}]  # two plays a row
    assert trial.aggregated == {"episodes": 4, "most_guesses": 3, "note": "text is left to the caller"}
    assert env_problem(trial) is None


def test_an_aggregate_that_fails_or_gives_no_dict_refuses_the_environment_in_one_line():
    failing = type(
        "Failing", (GuessNumber,), {"aggregate_metrics": staticmethod(lambda infos: infos[0]["gone"])}
    )
    problem = env_problem(try_environment(failing, ROWS, max_turns=6))
    assert problem == "aggregate_metrics failed on the 4 sample episodes' infos: KeyError: 'gone'"
    problem = env_problem(try_environment(GuessWithBrokenAggregate, ROWS, max_turns=6))
    assert problem == "aggregate_metrics failed on the 4 sample episodes' infos: it returned list, not a dict"


def test_a_skyrl_class_brings_its_own_aggregate_and_not_skyrls_default_mean():
    pytest.importorskip("skyrl_gym")
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    class Counting(BaseTextEnv):
        def __init__(self, env_config, extras):
            super().__init__()

        def step(self, action):
            return {"observations": [], "reward": 1.0, "done": True, "metadata": {}}

        def get_metrics(self):
            return {"solved": 1}

    class CountingWithTotal(Counting):
        @staticmethod
        def aggregate_metrics(metrics):
            return {"solved_total": sum(m["solved"] for m in metrics)}

    assert wrap_skyrl(Counting).aggregate_metrics is None  # BaseTextEnv's mean: the trainer's own
    own = wrap_skyrl(CountingWithTotal).aggregate_metrics
    assert own([{"solved": 1}, {"solved": 1}, {"solved": 0}]) == {"solved_total": 2}
    row = {"prompt": [{"role": "user", "content": "go"}]}
    trial = try_environment(wrap_skyrl(CountingWithTotal), [(row, ["x"])], max_turns=2)
    assert trial.aggregated == {"solved_total": 2} and env_problem(trial) is None
