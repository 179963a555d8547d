"""Episode calls as a reward worker runs them: the sampler's mirror of an episode ends as the
episode itself does, a worker that lost an episode replays it (or refuses, undeterministic)."""

import pytest

from rewards.env import Environment, Episode, StepResult
from rewards.env.episode import EpisodeRecord
from rewards.env.remote import CLOSE, START, STEP, EpisodeCalls, apply_call, call_item
from rewards.result import ScoreResult

ROW = {"secret": 11}
ACTIONS = ["8", "12", "11"]


def _calls(env="guess", **kw) -> EpisodeCalls:
    return EpisodeCalls(env, max_turns=kw.pop("max_turns", 6), **kw)


def _play(workers, actions=ACTIONS, key="e1", row=ROW, max_turns=6):
    """Play `actions` with each call going to workers[turn % len(workers)]; the mirror's result."""
    record = EpisodeRecord(max_turns=max_turns)
    first = workers[0].call(call_item(START, key, row), "")
    apply_call(record, START, "", first)
    for turn, action in enumerate(actions):
        worker = workers[(turn + 1) % len(workers)]
        result = worker.call(call_item(STEP, key, row, record), action)
        if apply_call(record, STEP, action, result)[1]:
            break
    return record.result()


def _local(actions=ACTIONS, env_cls=None, max_turns=6):
    from rewards.env.guess import GuessNumber

    episode = Episode(env_cls or GuessNumber, ROW, max_turns=max_turns)
    episode.start()
    for action in actions:
        if episode.act(action)[1]:
            break
    return episode.end()


def _same(a, b):
    return (a.status, a.reward, a.turns, a.transcript, a.success) == (
        b.status,
        b.reward,
        b.turns,
        b.transcript,
        b.success,
    )


def test_an_episode_played_on_one_worker_ends_as_it_does_here():
    worker = _calls()
    result = _play([worker])
    assert _same(result, _local()) and result.replayed == 0 and result.reward == 0.8
    assert worker.held() == 0  # over: let go


def test_a_worker_that_lost_the_episode_replays_it_from_the_recorded_actions():
    result = _play([_calls(), _calls()])  # every call on the other worker than the last
    assert _same(result, _local())
    # each step finds its worker one turn behind (or without the episode): 0, 1 and 2 actions replayed
    assert result.replayed == 0 + 1 + 2


def test_an_undeterministic_environment_is_not_replayed():
    class Coin(Environment):
        def reset(self, row):
            return "go"

        def step(self, action):
            return StepResult("again", 1.0, False)

    import rewards.env.loading as loading

    loading.BUNDLED_ENVIRONMENTS["coin-test"] = f"{__name__}:Coin"
    globals()["Coin"] = Coin
    try:
        result = _play([_calls("coin-test"), _calls("coin-test")], ["a", "b"])
    finally:
        del loading.BUNDLED_ENVIRONMENTS["coin-test"]
    assert result.status == "env_error" and "cannot be replayed" in result.reason and not result.usable


def test_a_replay_that_gives_other_observations_ends_the_episode():
    worker_a, worker_b = _calls(), _calls()
    record = EpisodeRecord(max_turns=6)
    apply_call(record, START, "", worker_a.call(call_item(START, "e", ROW), ""))
    apply_call(record, STEP, "8", worker_a.call(call_item(STEP, "e", ROW, record), "8"))
    record.transcript[-1] = "lower\n"  # not what the game answered
    result = worker_b.call(call_item(STEP, "e", ROW, record), "12")
    assert apply_call(record, STEP, "12", result) == ("", True)
    assert record.status == "env_error" and "other observations" in record.reason


def test_a_call_the_pool_could_not_complete_ends_the_episode():
    record = EpisodeRecord(max_turns=6)
    apply_call(
        record, STEP, "8", ScoreResult.failed("timeout", "scoring did not finish within chunk_timeout_s=2s")
    )
    assert (record.status, record.turns) == ("timeout", 1) and "chunk_timeout_s=2s" in record.reason
    other = EpisodeRecord(max_turns=6)
    apply_call(other, STEP, "8", ScoreResult.failed("error", "the reward worker process died"))
    assert other.status == "env_error"


def test_max_turns_and_close_on_the_worker():
    worker = _calls(max_turns=2)
    result = _play([worker], ["1", "2", "3"], max_turns=2)
    assert _same(result, _local(["1", "2", "3"], max_turns=2)) and result.status == "max_turns"
    worker.call(call_item(START, "open", ROW), "")
    assert worker.held() == 1
    assert worker.call(call_item(CLOSE, "open", ROW), "").status == "ok" and worker.held() == 0


def test_episode_calls_pickle_without_their_episodes():
    import pickle

    worker = _calls()
    worker.call(call_item(START, "open", ROW), "")
    copy = pickle.loads(pickle.dumps(worker))
    assert copy.held() == 0 and copy.env == "guess"
    with pytest.raises(ValueError, match="fields"):
        copy.score_batch([""], [None], None)
