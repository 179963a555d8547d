"""Episodes played on real pool workers: the same results as in process, a worker killed in the
middle of them (deterministic episodes replayed, others `env_error`), a step past its deadline."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from actors.pool.config import PoolConfig
from actors.pool.episodes import PoolEpisodes
from actors.pool.worker_pool import WorkerPool
from rewards.env import LocalEpisodes
from rewards.env.remote import EpisodeServer

pytestmark = pytest.mark.usefixtures("ray_cluster")

ROWS = [{"turns": 2}, {"turns": 3}, {"turns": 4}]
K = 2  # episodes per row: 6 in all, 3 on each of the 2 workers


def _pool(env: str, **kw) -> WorkerPool:
    cfg = PoolConfig(num_workers=2, name_prefix=f"env-{uuid.uuid4().hex[:6]}", **kw)
    return WorkerPool.create(EpisodeServer(env, max_turns=8), cfg, run_id="episodes")


def _play(host, actions_of, between_turns=lambda turn: None):
    """Drive `host` as the sampler does: each running episode's next action, turn after turn."""
    prompts = [f"start {row['turns']}" for row in ROWS]
    running = dict(enumerate(host.start(ROWS, prompts, K)))
    turn = 0
    while any(running.values()):
        between_turns(turn)
        actions = {i: actions_of(i, turn) for i, on in running.items() if on}
        for i, (_, over) in host.step(actions).items():
            running[i] = not over
        turn += 1
    return host.finish({})


def _actions(i: int, turn: int) -> str:
    return "ab" if (i + turn) % 2 else "abcd"


def _summary(results):
    return [(r.status, r.reward, r.turns, r.transcript) for r in results]


def test_episodes_on_the_pool_end_as_they_do_in_process():
    expected = _play(LocalEpisodes("pool_envs:Counting", max_turns=8), _actions)
    with _pool("pool_envs:Counting") as pool:
        host = PoolEpisodes(lambda: pool, max_turns=8)
        assert _summary(_play(host, _actions)) == _summary(expected)
        assert all(r.replayed == 0 for r in expected)


def _kill_worker_after_first_turn(pool: WorkerPool):
    victim = pool.worker_names()[0]
    pid = pool.worker_pids()[victim]

    def between(turn: int) -> None:
        if turn == 1:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.3)  # the process is gone before the next calls go out

    return between


def test_a_worker_killed_mid_episode_changes_no_result_of_a_deterministic_environment():
    expected = _play(LocalEpisodes("pool_envs:Counting", max_turns=8), _actions)
    with _pool("pool_envs:Counting", chunk_timeout_s=30) as pool:
        host = PoolEpisodes(lambda: pool, max_turns=8)
        results = _play(host, _actions, _kill_worker_after_first_turn(pool))
    assert _summary(results) == _summary(expected)
    replayed = [r.replayed for r in results]
    assert sum(replayed) >= 1, "no episode was rebuilt: the kill showed nothing"
    assert all(r > 0 for r in replayed[0::2] if r) and replayed[1::2] == [0, 0, 0]  # worker 1 kept its own


def test_a_worker_killed_mid_episode_ends_its_episodes_of_an_undeterministic_environment():
    with _pool("pool_envs:Drifting", chunk_timeout_s=30) as pool:
        host = PoolEpisodes(lambda: pool, max_turns=8)
        results = _play(host, _actions, _kill_worker_after_first_turn(pool))
    lost = [r for i, r in enumerate(results) if i % 2 == 0 and r.turns > 1]
    assert lost and all(r.status == "env_error" and "cannot be replayed" in r.reason for r in lost)
    assert all(r.status == "ok" for r in results[1::2])  # the other worker's episodes went on


def test_a_step_past_the_deadline_ends_its_episode_as_timeout_and_the_others_go_on():
    def actions(i: int, turn: int) -> str:
        return "hang" if (i, turn) == (2, 1) else _actions(i, turn)

    with _pool("pool_envs:Counting", chunk_timeout_s=2.0, max_retries=0) as pool:
        host = PoolEpisodes(lambda: pool, max_turns=8)
        results = _play(host, actions)
        assert results[2].status == "timeout" and not results[2].usable
        assert [r.status for i, r in enumerate(results) if i != 2] == ["ok"] * 5
        assert host.failure_reasons and "chunk_timeout_s=2" in host.failure_reasons[0]


def test_micro_batches_decoded_interleaved_give_what_they_give_one_at_a_time():
    """While one micro-batch waits for its answers from the pool the next decodes: the same tokens
    and the same episodes as decoding them one after another."""
    import torch

    from trainer.config import SamplingConfig
    from trainer.model_config import BuiltinModelConfig
    from trainer.policy.builtin import BuiltinPolicy
    from trainer.policy.char_tokenizer import CharTokenizer
    from trainer.policy.gpt import GPT
    from trainer.sampling.episodes import EpisodeBatch, generate_episode_batches
    from trainer.sampling.row_noise import row_keys

    tok = CharTokenizer("abcdefghnorstu 0123456789")
    torch.manual_seed(0)
    policy = BuiltinPolicy(GPT(BuiltinModelConfig(size="tiny", block_size=96), tok.vocab_size), tok)
    cfg = SamplingConfig(group_size=2, max_new_tokens=48, temperature=1.0)
    batches = [
        EpisodeBatch(
            [f"start {r['turns']}" for r in rows], rows, row_keys(0, 0, 3 * b, 3, 2, torch.device("cpu"))
        )
        for b, rows in enumerate([ROWS, ROWS[::-1], ROWS])
    ]
    with _pool("pool_envs:Counting") as pool:
        runs = {
            together: generate_episode_batches(
                policy,
                PoolEpisodes(lambda: pool, max_turns=8),
                batches,
                cfg,
                ["a", "b", "c"],
                together=together,
            )
            for together in (1, 2)
        }
    for alone, beside in zip(runs[1], runs[2], strict=True):
        assert torch.equal(alone.rollout.input_ids, beside.rollout.input_ids)
        assert _summary(alone.results) == _summary(beside.results)
    assert sum(r.turns for o in runs[2] for r in o.results) > len(ROWS) * 2 * 3, (
        "no episode went on: nothing shown"
    )
