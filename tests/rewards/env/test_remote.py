"""Episodes as a pool worker's server plays them: the sampler's mirror of an episode ends as the
episode itself does, a server that lost an episode replays it (or refuses, undeterministic)."""

import pickle

from rewards.env import Environment, Episode, StepResult
from rewards.env.calls import EpisodeCall, EpisodeStep, failed_call, record_step
from rewards.env.episode import EpisodeRecord
from rewards.env.remote import EpisodeServer

ROW = {"secret": 11}
ACTIONS = ["8", "12", "11"]


def _server(env="guess", **kw) -> EpisodeServer:
    return EpisodeServer(env, max_turns=kw.pop("max_turns", 6), **kw)


def _start(server: EpisodeServer, key: str, row=ROW) -> EpisodeStep:
    (step,) = server.start([EpisodeCall.start(key, row)])
    return step


def _step(server: EpisodeServer, key: str, record: EpisodeRecord, action: str, row=ROW) -> EpisodeStep:
    (step,) = server.step([EpisodeCall.step(key, row, record, action)])
    return step


def _play(servers, actions=ACTIONS, key="e1", row=ROW, max_turns=6):
    """Play `actions` with each call going to servers[turn % len(servers)]; the mirror's result."""
    record = EpisodeRecord(max_turns=max_turns)
    record_step(record, _start(servers[0], key, row))
    for turn, action in enumerate(actions):
        server = servers[(turn + 1) % len(servers)]
        if record_step(record, _step(server, key, record, action, row), action)[1]:
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


def test_an_episode_played_on_one_server_ends_as_it_does_here():
    server = _server()
    result = _play([server])
    assert _same(result, _local()) and result.replayed == 0 and result.reward == 0.8
    assert server.held() == 0  # over: let go


def test_a_server_that_lost_the_episode_replays_it_from_the_recorded_actions():
    result = _play([_server(), _server()])  # every call on the other server than the last
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
        result = _play([_server("coin-test"), _server("coin-test")], ["a", "b"])
    finally:
        del loading.BUNDLED_ENVIRONMENTS["coin-test"]
    assert result.status == "env_error" and "cannot be replayed" in result.reason and not result.usable


def test_a_replay_that_gives_other_observations_ends_the_episode():
    server_a, server_b = _server(), _server()
    record = EpisodeRecord(max_turns=6)
    record_step(record, _start(server_a, "e"))
    record_step(record, _step(server_a, "e", record, "8"), "8")
    record.transcript[-1] = "lower\n"  # not what the game answered
    step = _step(server_b, "e", record, "12")
    assert step.done and step.status == "env_error"
    assert record_step(record, step, "12") == ("", True)
    assert record.status == "env_error" and "other observations" in record.reason


def test_a_call_the_pool_could_not_complete_ends_the_episode():
    record = EpisodeRecord(max_turns=6)
    record_step(record, failed_call("timeout", "scoring did not finish within chunk_timeout_s=2s"), "8")
    assert (record.status, record.turns) == ("timeout", 1) and "chunk_timeout_s=2s" in record.reason
    other = EpisodeRecord(max_turns=6)
    record_step(other, failed_call("error", "the reward worker process died"), "8")
    assert other.status == "env_error"


def test_a_step_says_the_turn_and_whether_the_episode_goes_on():
    server, record = _server(), EpisodeRecord(max_turns=6)
    first = _start(server, "e")
    assert (first.observation, first.done) == ("guess 1-16\n", False)
    record_step(record, first)
    step = _step(server, "e", record, "8")
    assert (step.observation, step.reward, step.status, step.done) == ("higher\n", 0.0, None, False)
    assert record_step(record, step, "8") == ("higher\n", False)
    last = _step(server, "e", record, "11")
    assert (last.status, last.done, last.done_by_env, last.reward) == ("ok", True, True, 0.9)
    assert last.episode_info == {"guesses": 2}  # the episode ended: the environment's info comes back


def test_max_turns_and_close_on_the_server():
    server = _server(max_turns=2)
    result = _play([server], ["1", "2", "3"], max_turns=2)
    assert _same(result, _local(["1", "2", "3"], max_turns=2)) and result.status == "max_turns"
    _start(server, "open")
    assert server.held() == 1
    (closed,) = server.close([EpisodeCall.close("open")])
    assert closed.episode_info == {"guesses": 0} and server.held() == 0
    assert server.close([EpisodeCall.close("open")]) == [EpisodeStep()]  # not held: nothing to say


def test_a_server_pickles_without_its_episodes():
    server = _server()
    _start(server, "open")
    copy = pickle.loads(pickle.dumps(server))
    assert copy.held() == 0 and copy.env == "guess"
