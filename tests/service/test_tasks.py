"""The task seam: the registry, and the FEN task's data, scorer and picklability."""

from __future__ import annotations

import pickle

from rewards import score
from service.config import load_config
from service.tasks import TASKS, FenTask, build_task
from trainer.data.chess_games import CHESS_ALPHABET, pair_at
from trainer.policy.char_tokenizer import CharTokenizer


def test_the_registry_builds_the_configured_task():
    cfg = load_config("smoke")
    task = build_task(cfg)
    assert cfg.task.name == "fen" and isinstance(task, FenTask) and TASKS["fen"] is FenTask
    assert task.alphabet == CHESS_ALPHABET


def test_fen_task_streams_the_generated_games_and_scores_with_the_fen_reward():
    cfg = load_config("smoke")
    task = build_task(cfg)
    d = cfg.data
    stream = task.train_stream(None)
    assert [stream(i) for i in range(3)] == [pair_at(d.seed, i, d.min_plies, d.max_plies) for i in range(3)]
    assert task.training_pairs(print) is None  # generated: nothing to load
    held_out = task.eval_pairs()
    assert len(held_out) == d.eval_size
    tok = CharTokenizer(task.alphabet)
    for pair in held_out:  # every prompt and target is written in the task's characters
        tok.encode(pair.prompt), tok.encode(pair.target)
    target = held_out[0].target
    assert task.scorer().score(target, target) == score(target, target)
    assert task.eval_metrics([]) == {}


def test_a_task_travels_to_ray_train_workers_by_pickle():
    task = build_task(load_config("demo"))
    again = pickle.loads(pickle.dumps(task))
    assert again == task and again.train_stream(None)(5) == task.train_stream(None)(5)
