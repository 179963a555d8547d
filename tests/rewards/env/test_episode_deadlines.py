"""Episodes with a step deadline: a step that never returns ends its episode `timeout` at the
deadline; the episodes that shared its child are rebuilt from their recorded actions (or end
`env_error` when the environment is not deterministic); a trial stops at the first such step; a
reward worker's call answers within its share of the pool's deadline."""

from __future__ import annotations

import threading

from rewards.env import Environment, Episode, StepResult
from rewards.env.calls import EpisodeCall, record_step
from rewards.env.check import env_problem, try_environment
from rewards.env.episode import EpisodeRecord
from rewards.env.process import EnvProcess
from rewards.env.remote import EpisodeServer

DEADLINE_S = 1.0  # thousands of times what these environments take to answer


class Counts(Environment):
    deterministic = True

    def reset(self, row):
        self.n = 0
        return f"row {row['id']}"

    def step(self, action):
        if action == "hang":
            threading.Event().wait()
        self.n += 1
        return StepResult(f"{action}:{self.n}", 1.0, self.n >= 4)


class Drifts(Counts):
    deterministic = False


def _episodes(env_cls, process, n=3):
    episodes = [
        Episode(env_cls, {"id": i}, max_turns=8, step_timeout_s=DEADLINE_S, process=process) for i in range(n)
    ]
    for episode in episodes:
        assert episode.start() is not None
    return episodes


def test_a_step_that_never_returns_ends_at_the_deadline_and_the_others_are_replayed():
    process = EnvProcess(Counts)
    episodes = _episodes(Counts, process)
    for turn in range(2):
        for episode in episodes:
            episode.act(f"t{turn}")
    hanging, *others = episodes
    assert hanging.act("hang") == ("", True)
    for episode in others:  # their child went with the hanging step's: rebuilt, they go on
        assert episode.act("t2") == ("t2:3", False)
        assert episode.act("t3") == ("", True)
    results = [e.end() for e in episodes]
    assert results[0].status == "timeout" and "step took over 1s without returning" in results[0].reason
    assert [(r.status, r.reward, r.replayed) for r in results[1:]] == [("ok", 4.0, 2)] * 2
    assert results[1].transcript == ["row 1", "t0", "t0:1", "t1", "t1:2", "t2", "t2:3", "t3", "t3:4"]
    process.close()


def test_an_undeterministic_environment_loses_the_episodes_that_shared_the_child():
    process = EnvProcess(Drifts)
    hanging, other = _episodes(Drifts, process, 2)
    other.act("a")
    hanging.act("hang")
    assert other.act("b") == ("", True)
    result = other.end()
    assert result.status == "env_error" and "is not deterministic" in result.reason
    process.close()


class NoDemonstrationHangs(Counts):
    """Tried with one empty action per row (no demonstration): the first one hangs."""

    def step(self, action):
        return super().step("hang" if action == "" else action)


def test_a_trial_stops_at_the_first_episode_past_the_deadline():
    rows = [({"id": i}, [""]) for i in range(4)]
    trial = try_environment(NoDemonstrationHangs, rows, max_turns=4, step_timeout_s=DEADLINE_S)
    assert (trial.rows, trial.episodes, dict(trial.statuses)) == (1, 1, {"timeout": 1})
    problem = env_problem(trial)
    assert problem.startswith("row {'id': 0} ended timeout: step took over 1s without returning")
    assert problem.endswith("the trial stopped there") and "\n" not in problem


def test_a_workers_call_answers_within_its_share_of_the_pools_deadline():
    """Three episodes' steps in one call of 1.5 s: the first hangs until the call's time is out, the
    others end `timeout` unplayed; the worker answers all three (the pool never kills it)."""
    server = EpisodeServer(f"{__name__}:Counts", max_turns=8, step_timeout_s=30.0, call_budget_s=1.5)
    server.setup()
    records = [EpisodeRecord(max_turns=8) for _ in range(3)]
    rows = [{"id": i} for i in range(3)]
    starts = server.start([EpisodeCall.start(f"e{i}", r) for i, r in enumerate(rows)])
    for record, step in zip(records, starts, strict=True):
        record_step(record, step)
    actions = ["hang", "a", "b"]
    steps = server.step([EpisodeCall.step(f"e{i}", rows[i], records[i], actions[i]) for i in range(3)])
    for record, action, step in zip(records, actions, steps, strict=True):
        record_step(record, step, action)
    ended = [r.result() for r in records]
    assert [r.status for r in ended] == ["timeout"] * 3
    assert "left of its pool call (pool.chunk_timeout_s)" in ended[0].reason
    assert all("not stepped" in r.reason for r in ended[1:])
    assert server.process.kills == 1
    server.process.close()
