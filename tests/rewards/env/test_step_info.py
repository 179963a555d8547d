"""A step's info (gymnasium's `info`, SkyRL's `metadata`): kept per turn as JSON-safe data, the
same whether the episode runs here or on a reward worker, and refused in one line when it cannot
be recorded."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rewards.env import Environment, StepResult
from rewards.env.calls import EpisodeCall, EpisodeStep, keep_episode_info, record_step
from rewards.env.check import env_problem, play, try_environment
from rewards.env.episode import MAX_INFO_CHARS, EpisodeRecord
from rewards.env.guess import GuessNumber
from rewards.env.remote import EpisodeServer
from rewards.env.skyrl import wrap_skyrl


class Reporting(Environment):
    """Says what each turn was; `info` (a class attribute) is what the second turn reports."""

    info: object = None

    def reset(self, row):
        self.n = 0
        return "go\n"

    def step(self, action):
        self.n += 1
        if self.n == 1:
            return ("more\n", 0.0, False, {"turn": 1, "seen": {action}})  # a set: kept as its repr
        if self.n == 2:
            return StepResult("more\n", 0.0, False, type(self).info)
        return ("", 1.0, True)  # no info


def _play(env_cls, turns=3):
    return play(env_cls, {}, ["a", "b", "c"][:turns], max_turns=5, step_timeout_s=None)


def _with(info):
    return type("Reports", (Reporting,), {"info": info})


def test_each_answered_turn_keeps_its_info_as_json_data_and_empty_where_it_gave_none():
    result = _play(_with({"score": np.float32(0.5), "tags": ["x"], "counts": np.arange(3)}))
    assert result.status == "ok" and result.reward == 1.0
    assert result.infos == [
        {"turn": 1, "seen": "{'a'}"},
        {"score": 0.5, "tags": ["x"], "counts": [0, 1, 2]},
        {},
    ]
    assert _play(_with({})).infos[1] == {} and _play(_with(None)).infos[1] == {}


@pytest.mark.parametrize(
    ("info", "reason"),
    [
        ("a string", "step's info must be a dict, got str"),
        ({"x": float("nan")}, "step's info cannot be recorded as JSON"),
        ({"nested": {(1, 2): 3}}, "step's info cannot be recorded as JSON"),
    ],
)
def test_an_info_that_cannot_be_recorded_ends_the_episode_as_env_error(info, reason):
    result = _play(_with(info))
    assert (result.status, result.usable, result.turns) == ("env_error", False, 2)
    assert reason in result.reason


def test_an_info_over_the_limit_is_replaced_by_a_note_and_the_episode_goes_on():
    result = _play(_with({"blob": "x" * MAX_INFO_CHARS}))
    assert result.status == "ok" and "over the 2000 kept" in result.infos[1]["info_dropped"]


SKYRL_ROW = {"prompt": [{"role": "user", "content": "hi"}]}


class SkyRLShaped:
    """The shape of a SkyRL-gym environment: init and step with chat messages and metadata."""

    def __init__(self, env_config, extras):
        self.turns = 0

    def init(self, prompt):
        return prompt, {}

    def step(self, action):
        self.turns += 1
        done = self.turns == 2
        return {
            "observations": [] if done else [{"role": "user", "content": "again"}],
            "reward": 1.0 if done else 0.0,
            "done": done,
            "metadata": {"tool": "calc", "turn": self.turns},
        }


def test_a_skyrl_steps_metadata_is_its_info():
    result = play(wrap_skyrl(SkyRLShaped), SKYRL_ROW, ["one", "two"], max_turns=4, step_timeout_s=None)
    assert result.transcript[0] == "hi"
    assert result.status == "ok" and result.infos == [
        {"tool": "calc", "turn": 1},
        {"tool": "calc", "turn": 2},
    ]


def _through(steps: list[EpisodeStep]) -> EpisodeStep:
    """A call's one step as it reaches the sampler from a worker's process (pickled)."""
    (step,) = pickle.loads(pickle.dumps(steps))
    return step


def test_an_episode_on_a_worker_brings_back_the_same_infos():
    row, actions = {"secret": 3, "tries": 2}, ["9", "12"]  # a wrong guess, then out of tries
    want = play(GuessNumber, row, actions, max_turns=6, step_timeout_s=None)
    server, record = EpisodeServer("guess", max_turns=6), EpisodeRecord(max_turns=6)
    record_step(record, _through(server.start([EpisodeCall.start("e", row)])))
    for action in actions:
        step = _through(server.step([EpisodeCall.step("e", row, record, action)]))
        if record_step(record, step, action)[1]:
            break
    got = record.result()
    assert got.infos == want.infos and got.status == want.status
    assert got.infos[-1] == {"ended": "out of tries"} and got.infos[:-1] == [{}]


class Gymnasium(Environment):
    """Steps as gymnasium's API returns them: numpy numbers, terminated and truncated, info."""

    def reset(self, row):
        self.n = 0
        return "go\n"

    def step(self, action):
        self.n += 1
        truncated = np.bool_(self.n == 2)  # its own time limit
        return "more\n", np.float32(0.25), np.bool_(False), truncated, {"n": np.int64(self.n)}


def test_gymnasiums_five_items_are_taken_and_truncated_ends_the_episode():
    result = _play(Gymnasium)
    assert (result.status, result.turns, result.reward, result.done_by_env) == ("ok", 2, 0.5, True)
    assert result.infos == [{"n": 1}, {"n": 2}]


class Summing(Reporting):
    """Says at the end how many turns it saw (its episode info)."""

    def episode_info(self):
        return {"turns_seen": self.n}


class SummingBadly(Reporting):
    def episode_info(self):
        raise RuntimeError("no metrics")


def test_the_environments_episode_info_is_kept_and_a_failing_one_spoils_nothing():
    result = _play(Summing)
    assert result.status == "ok" and result.episode_info == {"turns_seen": 3}
    cut = _play(Summing, turns=1)  # the sampler cut it after one turn: asked all the same
    assert cut.episode_info == {"turns_seen": 1}
    bad = _play(SummingBadly)
    assert (bad.status, bad.reward, bad.episode_info) == ("ok", 1.0, None)
    assert bad.reason == "episode_info raised RuntimeError: no metrics"


def test_a_skyrl_environments_get_metrics_is_its_episode_info():
    metrics = type("WithMetrics", (SkyRLShaped,), {"get_metrics": lambda self: {"steps": self.turns}})
    result = play(wrap_skyrl(metrics), SKYRL_ROW, ["one", "two"], max_turns=4, step_timeout_s=None)
    assert result.episode_info == {"steps": 2}


def _on_worker(actions, *, close: bool):
    """Play `actions` on an EpisodeServer, its steps pickled as a worker sends them; close it as the
    sampler does when it cut the episode; the mirror's result."""
    server, record = EpisodeServer("guess", max_turns=6), EpisodeRecord(max_turns=6)
    row = {"secret": 3}
    record_step(record, _through(server.start([EpisodeCall.start("e", row)])))
    for action in actions:
        step = _through(server.step([EpisodeCall.step("e", row, record, action)]))
        if record_step(record, step, action)[1]:
            break
    if close:
        keep_episode_info(record, _through(server.close([EpisodeCall.close("e")])))
    return record.result()


def test_an_episode_on_a_worker_brings_back_its_episode_info_when_it_ends_or_is_closed():
    assert _on_worker(["9", "3"], close=False).episode_info == {"guesses": 2}  # the environment ended it
    assert _on_worker(["9"], close=True).episode_info == {"guesses": 1}  # the sampler cut it


def test_python_tool_says_what_ran_in_each_turns_info():
    from rewards.env.python_tool import HELP, PythonTool
    from rewards.sandbox import sandbox_unavailable_reason

    if sandbox_unavailable_reason() is not None:
        pytest.skip(f"no sandbox here: {sandbox_unavailable_reason()}")
    actions = ["<python>print(2 + 3)", "<python>1 / 0", "thinking", "<answer>5"]
    result = play(PythonTool, {"question": "What is 2 + 3?", "answer": "5"}, actions, 4, None)
    assert (result.status, result.reward, result.turns) == ("ok", 1.0, 4)
    assert result.transcript[2] == "<output>\n5\n</output>\n" and result.transcript[6] == HELP
    tool = [info.get("tool") for info in result.infos]
    assert tool == ["python", "python", "none: the instructions again", None]
    assert result.infos[0]["status"] == "ok" and result.infos[1]["status"] not in ("ok", None)


def test_trying_an_environment_counts_the_keys_of_its_infos_and_notes_a_failing_episode_info():
    trial = try_environment(GuessNumber, [({"secret": 5, "tries": 2}, ["8", "9"])], max_turns=6)
    assert (trial.turns, trial.turn_info_keys, trial.episode_info_keys) == (4, {"ended": 2}, {"guesses": 2})
    assert trial.episode_numbers == {"guesses": [2.0, 2.0]}  # each play's, as a run would average them
    noted = try_environment(SummingBadly, [({}, ["a", "b", "c"])], max_turns=6)
    assert env_problem(noted) is None and noted.notes == ["episode_info raised RuntimeError: no metrics"]


class MixedMetrics(GuessNumber):
    """An episode_info of a number, a flag and text: the number and the flag (as 1) are averaged."""

    def episode_info(self):
        return {"guesses": self.guesses, "won": True, "note": "text"}


def test_trying_an_environment_keeps_the_numbers_of_episode_info():
    trial = try_environment(MixedMetrics, [({"secret": 5, "tries": 2}, ["5"])], max_turns=6)
    assert trial.episode_numbers == {"guesses": [1.0, 1.0], "won": [1.0, 1.0]}
    assert trial.episode_info_keys == {"guesses": 2, "won": 2, "note": 2}
