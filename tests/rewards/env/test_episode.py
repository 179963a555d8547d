"""An episode under its rules: every way an environment can fail ends it with its status, never
an exception; the bundled `guess` environment; finding and trying an environment."""

import random
import re
import time

import pytest

from rewards.env import Environment, EnvSpecError, Episode, LocalEpisodes, StepResult, load_environment
from rewards.env.check import env_problem, try_environment
from rewards.env.guess import GuessNumber
from tests.company import Company


class Counter(Environment):
    deterministic = True

    def reset(self, row):
        self.n = 0
        return "start"

    def step(self, action):
        self.n += 1
        return StepResult(f"n={self.n}", 1.0, action == "stop")


def play(env_cls, actions, max_turns=5, **kw):
    episode = Episode(env_cls, {}, max_turns=max_turns, **kw)
    assert episode.start() is not None or episode.over
    for action in actions:
        if episode.act(action)[1]:
            break
    return episode.end()


def test_done_ends_the_episode_ok_with_the_summed_or_final_reward():
    result = play(Counter, ["a", "b", "stop", "never"])
    assert (result.status, result.turns, result.reward, result.usable) == ("ok", 3, 3.0, True)
    assert result.transcript == ["start", "a", "n=1", "b", "n=2", "stop", "n=3"]
    episode = Episode(Counter, {}, max_turns=5, reward_mode="final")
    episode.start()
    episode.act("stop")
    assert episode.end().reward == 1.0


def test_an_episode_that_never_ends_stops_at_max_turns_without_a_reward():
    result = play(Counter, ["a"] * 10, max_turns=4)
    assert (result.status, result.turns, result.usable, result.reward) == ("max_turns", 4, False, 0.0)
    assert "max_turns=4" in result.reason


def test_the_sampler_cutting_an_episode_keeps_its_reward_so_far():
    result = play(Counter, ["a", "b"])  # still going when the sampler's budget ran out
    assert (result.status, result.usable, result.reward) == ("max_tokens", True, 2.0)


class Raises(Counter):
    def step(self, action):
        raise RuntimeError("boom")


class WrongShape(Counter):
    def step(self, action):
        return {"observation": "x"}


class BadReward(Counter):
    def step(self, action):
        return ("x", float("nan"), False)


class BadDone(Counter):
    def step(self, action):
        return ("x", 1.0, "yes")


class ResetRaises(Counter):
    def reset(self, row):
        raise KeyError("secret")


class ResetNotText(Counter):
    def reset(self, row):
        return 42


class Slow(Counter):
    def step(self, action):
        time.sleep(1.0)  # twice the step deadline below
        return super().step(action)


class CloseRaises(Counter):
    def close(self):
        raise OSError("gone")


@pytest.mark.parametrize(
    ("env_cls", "status", "reason"),
    [
        (Raises, "env_error", "step raised RuntimeError: boom"),
        (WrongShape, "env_error", "step must return (observation, reward, done)"),
        (BadReward, "env_error", "reward must be a finite number"),
        (BadDone, "env_error", "done must be a bool"),
        (ResetRaises, "env_error", "reset raised KeyError"),
        (ResetNotText, "env_error", "reset must return the first observation"),
    ],
)
def test_a_failing_environment_ends_its_episode_with_a_status(env_cls, status, reason):
    result = play(env_cls, ["a", "b"])
    assert (result.status, result.usable, result.reward) == (status, False, 0.0)
    assert reason in result.reason


def test_a_late_step_ends_the_episode_as_timeout():
    # a deadline thousands of times what the constructor and reset take: only the step passes it,
    # however loaded the machine
    result = play(Slow, ["a", "b"], step_timeout_s=0.5)
    assert (result.status, result.usable, result.turns) == ("timeout", False, 1)
    assert result.reason.startswith("step ") and "task.step_timeout_s=0.5" in result.reason


def test_a_failing_close_spoils_nothing_played():
    result = play(CloseRaises, ["stop"])
    assert (result.status, result.usable, result.reward) == ("ok", True, 1.0)
    assert "close raised OSError" in result.reason


def test_local_episodes_end_an_episode_whose_reset_is_not_the_prompt():
    host = LocalEpisodes(Counter, max_turns=3)
    assert host.start([{}, {}], ["start", "other"], 2) == [True, True, False, False]
    assert host.step({0: "stop", 1: "x"}) == {0: ("", True), 1: ("n=1", False)}
    results = host.finish({1: ("max_tokens", None)})
    assert [r.status for r in results] == ["ok", "max_tokens", "env_error", "env_error"]
    assert "not the row's prompt" in results[2].reason
    assert host.failure_reasons == [results[2].reason, results[3].reason]


def test_guess_answers_higher_lower_and_rewards_fewer_guesses():
    env = GuessNumber()
    assert env.reset({"secret": 11}) == "guess 1-16\n"
    assert env.step("8") == ("higher\n", 0.0, False)
    assert env.step("12") == ("lower\n", 0.0, False)
    assert env.step("11") == ("", 0.8, True)
    env.reset({"secret": 3})
    assert env.step("x") == ("", 0.0, True)  # not a number: the episode ends unrewarded
    env.reset({"secret": 3, "tries": 2})
    env.step("1")
    assert env.step("2") == ("", 0.0, True)  # out of tries
    with pytest.raises(ValueError, match="outside"):
        env.reset({"secret": 40})


def test_guess_demonstrations_find_the_number_among_the_possible_ones():
    rng = random.Random(0)
    for index in range(200):
        row = GuessNumber.generate_row(index, seed=1)
        actions = GuessNumber.demonstration(row, rng)
        result = play_row(row, actions)
        assert result.status == "ok"
    rows = [GuessNumber.generate_row(i, seed=1)["secret"] for i in range(200)]
    assert set(rows) == set(range(1, 17)) and rows == [
        GuessNumber.generate_row(i, seed=1)["secret"] for i in range(200)
    ]


def play_row(row, actions):
    episode = Episode(GuessNumber, row, max_turns=6)
    episode.start()
    for action in actions:
        if episode.act(action)[1]:
            break
    return episode.end()


def test_load_environment_by_bundled_name_or_module_and_refuses_the_rest():
    assert load_environment("guess") is GuessNumber
    assert load_environment("rewards.env.guess:GuessNumber") is GuessNumber
    for spec, message in [
        ("nope", "name a bundled environment (chess-play, guess, python-tool) or 'module:Class'"),
        ("no_such_module:Env", "cannot import module 'no_such_module'"),
        ("rewards.env.guess:Nope", "has no attribute 'Nope'"),
        ("rewards.env.guess:HIGHER", "is a str, not a class"),
        ("random:Random", "has no reset or step method"),
    ]:
        with pytest.raises(EnvSpecError, match=re.escape(message)):
            load_environment(spec)


class Drifting(Counter):
    calls = 0

    def step(self, action):
        Drifting.calls += 1
        return StepResult(f"call {Drifting.calls}", 0.0, True)


def test_trying_an_environment_finds_failures_and_a_false_determinism():
    good = try_environment(GuessNumber, [({"secret": 5}, ["8", "4", "5"])], max_turns=6)
    assert env_problem(good) is None and good.calls == 2 * 4 and good.statuses == {"ok": 2}
    broken = try_environment(Raises, [({}, ["a"])], max_turns=6)
    assert "step raised RuntimeError: boom" in env_problem(broken)
    drifting = try_environment(Drifting, [({}, ["a"])], max_turns=6)
    assert "declared deterministic, but" in env_problem(drifting)


class Waits(Counter):
    """Each step waits (as on a remote service) until all 8 episodes' steps are waiting at once."""

    concurrent_steps = 8
    company = Company(8)

    def step(self, action):
        if not self.company.wait():
            raise RuntimeError("the 8 steps never waited at once")
        return super().step(action)


def test_an_environment_that_waits_steps_its_episodes_at_once_when_it_allows():
    host = LocalEpisodes(Waits, max_turns=3)
    host.start([{}], ["start"], 8)
    replies = host.step({i: "stop" if i % 2 else "go" for i in range(8)})  # one at a time: each alone
    assert Waits.company.most == 8
    assert replies == {i: ("", True) if i % 2 else ("n=1", False) for i in range(8)}
    assert [r.status for r in host.finish({})] == ["max_tokens", "ok"] * 4
