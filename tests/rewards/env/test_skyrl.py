"""SkyRL-gym environments from the `skyrl-gym` package, unchanged, through the environment seam:
the first observation from init's chat prompt, the observation messages as answers, the per-turn
rewards summed."""

import pytest

from rewards.env import Episode, load_environment
from rewards.env.skyrl import SkyRLEnvironment

pytest.importorskip("skyrl_gym")
GSM8K_MULTI = "skyrl_gym.envs.gsm8k.multi_turn_env:GSM8kMultiTurnEnv"
ROW = {
    "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 6 * 7?"}],
    "env_class": "gsm8k_multi_turn",
    "reward_spec": {"method": "rule", "ground_truth": "42"},
    "extra_info": {"max_turns": 3},
}


def _play(actions):
    episode = Episode(load_environment(GSM8K_MULTI), ROW, max_turns=5)
    first = episode.start()
    for action in actions:
        if episode.act(action)[1]:
            break
    return first, episode.end()


def test_a_skyrl_class_is_wrapped_and_plays_its_own_rules():
    env_cls = load_environment(GSM8K_MULTI)
    assert issubclass(env_cls, SkyRLEnvironment) and not env_cls.deterministic
    first, result = _play(["it is 41 #### 41", "#### 42"])
    assert first == "What is 6 * 7?"
    assert result.status == "ok" and result.turns == 2 and result.done_by_env
    # its per-turn rewards, summed: the format score of a wrong but well-formed answer, then 1.0
    assert result.reward == pytest.approx(0.2 / 3 + 1.0)
    assert "Please provide your step-by-step reasoning" in result.transcript[2]  # its user message


def test_a_skyrl_episode_ends_at_its_own_max_turns():
    _, result = _play(["no", "no", "no", "no"])
    assert (result.status, result.turns, result.reward) == ("ok", 3, 0.0)


def test_a_skyrl_environment_that_cannot_start_is_an_env_error():
    episode = Episode(load_environment(GSM8K_MULTI), {"prompt": ROW["prompt"]}, max_turns=5)  # no reward_spec
    assert episode.start() is None and episode.status == "env_error"
    assert "reward_spec" in episode.reason or "KeyError" in episode.reason
