"""The `text` task: its config keys, its rows and held-out set, the fields its rewards take, and
its refusals (one line naming the key, or the file and line)."""

from __future__ import annotations

import json
import pickle

import pytest
import yaml

from rewards import register_reward, unregister_reward
from service.config import ConfigError, config_to_yaml, load_config, validate_config
from service.tasks import TextTask, build_task
from service.train import main
from trainer.data.pairs import FieldPair


def sum_reward(completion, a, b):
    return float(completion == str(a + b))


def exact_reward(completion, target):
    return float(completion == target)


def length_reward(completion):
    return float(len(completion))


def every_field(completion, **row):
    return float(len(row))


@pytest.fixture(autouse=True)
def rewards_registered():
    names = {"sum_reward": sum_reward, "exact_reward": exact_reward, "length_reward": length_reward}
    names["every_field"] = every_field
    for name, fn in names.items():
        register_reward(name, fn, replace=True)
    yield
    for name in names:
        unregister_reward(name)


def write_rows(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def addition_rows(n, start=0):
    return [
        {"prompt": f"{a}+{a % 7}=", "target": str(a + a % 7), "a": a, "b": a % 7}
        for a in range(start, start + n)
    ]


def text_config(path, reward="sum_reward", **task):
    sets = [
        "task.name=text",
        f"task.path={path}",
        f"reward.user=[{{fn: {reward}}}]",
        "data.eval_size=4",
        "sft.steps=2",
    ]
    return load_config("smoke", overrides=sets + [f"task.{k}={json.dumps(v)}" for k, v in task.items()])


def test_rows_become_pairs_with_only_the_fields_the_rewards_take(tmp_path):
    path = write_rows(tmp_path / "train.jsonl", [{**r, "note": "unused"} for r in addition_rows(20)])
    task = build_task(text_config(path))
    assert isinstance(task, TextTask)
    held, train = task.eval_pairs(), task.training_pairs(lambda line: None)
    assert len(held) == 4 and len(train) == 16
    assert not {p.prompt for p in held} & {p.prompt for p in train}
    assert all(isinstance(p, FieldPair) and set(p.fields) == {"a", "b"} for p in train + held)
    assert set(task.alphabet) == set("0123456789+=")
    assert task.scorer().score("3", "3", {"a": 1, "b": 2}).total == 1.0
    stream = task.train_stream(train)
    assert sorted(stream(i).prompt for i in range(16)) == sorted(p.prompt for p in train)  # one epoch


def test_the_held_out_split_is_deterministic_and_follows_the_eval_seed(tmp_path):
    path = write_rows(tmp_path / "train.jsonl", addition_rows(30))
    first = build_task(text_config(path)).eval_pairs()
    assert build_task(text_config(path)).eval_pairs() == first
    other = load_config("smoke", overrides=[*_sets(path), "data.eval_seed=5"])
    assert build_task(other).eval_pairs() != first


def _sets(path):
    return ["task.name=text", f"task.path={path}", "reward.user=[{fn: sum_reward}]", "data.eval_size=4"]


def test_an_eval_file_is_the_held_out_set_and_its_prompts_leave_training(tmp_path):
    rows = addition_rows(10)
    path = write_rows(tmp_path / "train.jsonl", rows)
    eval_path = write_rows(tmp_path / "eval.jsonl", rows[:3] + addition_rows(2, start=50))
    task = build_task(text_config(path, eval_path=eval_path))
    notes = []
    train = task.training_pairs(notes.append)
    assert len(task.eval_pairs()) == 5 and len(train) == 7
    assert "7 training rows (3 left out as held-out prompts)" in notes[0]


def test_prompt_and_target_keys_and_rows_without_targets(tmp_path):
    rows = [{"question": f"{a}?", "answer": str(a)} for a in range(8)] + [{"question": "x?"}]
    path = write_rows(tmp_path / "qa.jsonl", rows)
    sets = [*_sets(path)[:2], "reward.user=[{fn: length_reward}]", "data.eval_size=2"]
    keys = ["task.prompt_key=question", "task.target_key=answer"]
    task = build_task(load_config("smoke", overrides=[*sets, *keys, "sft.steps=0"]))
    pairs = task.training_pairs(print) + task.eval_pairs()
    assert {p.target for p in pairs if p.prompt == "x?"} == {None}
    assert all(p.fields == {} for p in pairs)  # length_reward takes no field
    with pytest.raises(
        ValueError, match=r"sft.steps: 6 needs a target in every training row; .*qa.jsonl:9 has no 'answer'"
    ):
        build_task(load_config("smoke", overrides=[*sets, *keys]))


def test_kwargs_rewards_get_every_field_and_prompt(tmp_path):
    path = write_rows(tmp_path / "train.jsonl", addition_rows(10))
    task = build_task(text_config(path, reward="every_field"))
    pair = task.eval_pairs()[0]
    assert set(pair.fields) == {"prompt", "a", "b"}  # 'target' travels as the target
    assert task.scorer().score("x", pair.target, pair.fields).total == 4.0  # prompt, a, b, target


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (['{"target": "1"}'], r"train.jsonl:11: missing 'prompt' \(task.prompt_key\)"),
        (
            [{"prompt": "1+1=", "a": 1, "b": 1}, "{not json", '"text"'],
            r"train.jsonl:12: invalid JSON .* \(and 1 more bad rows\)",
        ),
        ([{"prompt": 3}], r"train.jsonl:11: 'prompt' must be a string, got int"),
        ([{"prompt": "a", "target": 3}], r"train.jsonl:11: 'target' must be a string or null, got int"),
        ([], r"train.jsonl: holds no rows"),
    ],
)
def test_a_bad_row_refuses_the_file_naming_file_and_line(tmp_path, rows, message):
    path = (
        write_rows(tmp_path / "train.jsonl", addition_rows(10) + rows)
        if rows
        else write_rows(tmp_path / "train.jsonl", [])
    )
    with pytest.raises(ValueError, match=message) as info:
        build_task(text_config(path))
    assert str(info.value).startswith("task.path: ") and "\n" not in str(info.value)


def test_a_reward_needing_a_field_some_row_lacks_is_refused(tmp_path):
    rows = addition_rows(10)
    del rows[6]["b"]
    path = write_rows(tmp_path / "train.jsonl", rows)
    with pytest.raises(ValueError, match=r"reward.user: 'sum_reward' takes 'b', which .*train.jsonl:7 lacks"):
        build_task(text_config(path))
    no_targets = write_rows(tmp_path / "plain.jsonl", [{"prompt": f"{i}", "a": i, "b": 0} for i in range(10)])
    with pytest.raises(ValueError, match=r"'exact_reward' takes 'target', which .*plain.jsonl:1 lacks"):
        build_task(
            load_config(
                "smoke",
                overrides=[
                    *_sets(no_targets)[:2],
                    "reward.user=[{fn: exact_reward}]",
                    "data.eval_size=2",
                    "sft.steps=0",
                ],
            )
        )


def test_the_fen_task_refuses_a_reward_that_takes_row_fields():
    cfg = load_config("smoke", overrides=["reward.user=[{fn: sum_reward}]"])
    with pytest.raises(ValueError, match=r"'sum_reward' takes 'a', which the fen task's items"):
        build_task(cfg)
    missing = load_config("smoke", overrides=["reward.user=[{fn: 'no_such_module_xyz:f'}]"])
    with pytest.raises(ValueError, match=r"cannot import module 'no_such_module_xyz'"):
        build_task(missing)  # before Ray starts: the driver exits 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["task.name=text", "reward.user=[{fn: sum_reward}]"],
            r"^task.path: the text task needs a JSONL file",
        ),
        (
            ["task.name=text", "task.path=x.jsonl"],
            r"^reward.user: the text task is scored by user rewards alone",
        ),
        (
            ["task.name=text", "task.path=x.jsonl", "reward.user=[{fn: f}]", "data.source=jsonl"],
            r"^task.source: .*read only with task.name 'fen'",
        ),
        (
            ["task.name=text", "task.path=x.jsonl", "reward.user=[{fn: f}]", "task.min_plies=2"],
            r"^task.min_plies: .*read only with task.name 'fen', 'move'",
        ),
        (["task.stop=[';']"], r"^task.stop: \[';'\] is read only with task.name 'code', 'env', 'text'"),
        (
            ["task.name=text", "task.path=x.jsonl", "task.target_key=prompt", "reward.user=[{fn: f}]"],
            r"^task.target_key: 'prompt' is task.prompt_key too",
        ),
        (
            ["task.name=text", "task.path=x.jsonl", "task.stop=['']"],
            r"^task.stop: \[''\] holds an empty string",
        ),
    ],
)
def test_config_mistakes_are_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("smoke", overrides=overrides)


def test_resolved_configs_round_trip_through_yaml():
    # a resumed run reads its config.yaml back: every task key, default or not, must load again
    fen = load_config("smoke")
    text = load_config("smoke", overrides=[*_sets("x.jsonl"), "task.stop=['\\n', ';']"])
    for cfg in (fen, text):
        assert validate_config(yaml.safe_load(config_to_yaml(cfg))) == cfg


def test_the_task_travels_to_workers_without_its_rows(tmp_path):
    path = write_rows(tmp_path / "train.jsonl", addition_rows(40))
    task = build_task(text_config(path, stop=[";"]))
    blob = pickle.dumps(task)
    again = pickle.loads(blob)
    assert again == task and again.data is None and again.alphabet == task.alphabet and again.stop == (";",)
    assert len(blob) < 1000
    pairs = task.training_pairs(print)
    assert again.train_stream(pairs)(3) == task.train_stream(pairs)(3)


def test_the_driver_refuses_bad_rows_with_exit_2_and_one_line(tmp_path, capsys):
    path = write_rows(tmp_path / "train.jsonl", addition_rows(10) + ['{"a": 1}'])
    sets = ["task.name=text", f"task.path={path}", "reward.user=[{fn: sum_reward}]"]
    code = main(
        ["--preset", "smoke", "--run-dir", str(tmp_path / "run"), *[a for s in sets for a in ("--set", s)]]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "train.jsonl:11: missing 'prompt'" in err
    assert not (tmp_path / "run").exists()
