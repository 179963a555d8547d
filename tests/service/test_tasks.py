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
    d, t = cfg.data, cfg.task
    stream = task.train_stream(None)
    assert [stream(i) for i in range(3)] == [pair_at(d.seed, i, t.min_plies, t.max_plies) for i in range(3)]
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


def test_a_jsonl_file_gives_canonical_targets_and_its_own_held_out_set(tmp_path):
    import json

    import chess

    from trainer.data.chess_games import eval_pairs, generate_pairs, is_held_out

    lines, respelled = [], 0
    for pair in generate_pairs(200, 0, 1, 4) + eval_pairs(12, 77, 1, 4):
        board = chess.Board()
        for san in pair.prompt.split():
            board.push_san(san)
        fen = pair.target
        if board.ep_square is not None and fen.split()[3] == "-":  # python-chess omits an idle ep square
            fen = fen.replace(" - ", f" {chess.square_name(board.ep_square)} ", 1)  # another tool writes it
            respelled += 1
        lines.append(json.dumps({"prompt": pair.prompt, "target": fen + "  "}))
    assert respelled > 10
    lines.append(json.dumps({"prompt": "e4", "target": "not a fen"}))
    path = tmp_path / "games.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cfg = load_config("smoke", None, ["task.source=jsonl", f"task.path={path}", "data.eval_size=8"])
    task = build_task(cfg)
    logs = []
    train = task.training_pairs(logs.append)
    held = task.eval_pairs()
    assert all(p.target == chess.Board(p.target).fen() for p in train + held)  # canonical spelling
    assert held and all(is_held_out(p.target) for p in held)
    assert not {p.target for p in held} & {p.target for p in train}
    assert "skipped 1 bad records" in logs[0] and "not a FEN" in logs[0]
    assert pickle.loads(pickle.dumps(task)).eval_pairs() == held
    assert task.eval_group[0] == "plies" and task.eval_group[1]("e4 e5") == "2"


def test_an_environment_class_is_resolved_once_per_process_and_travels_by_its_name(monkeypatch):
    from service.tasks import env as env_module

    loaded = []
    real = env_module.load_environment
    monkeypatch.setattr(env_module, "load_environment", lambda spec: loaded.append(spec) or real(spec))
    env_module.environment_class.cache_clear()
    task = build_task(load_config("env-smoke", overrides=["task.hosting=local"]))
    task.train_stream(None)(0), task.grpo_stream(None)(1), task.episode_host(), task.deterministic
    assert loaded == ["guess"]
    again = pickle.loads(pickle.dumps(task))  # as a trainer process receives it: the name, not the class
    assert b"GuessNumber" not in pickle.dumps(task) and again.env == "guess"
    env_module.environment_class.cache_clear()  # a fresh process
    again.train_stream(None)(0), again.episode_host(), again.deterministic
    assert loaded == ["guess", "guess"]
