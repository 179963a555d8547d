"""The text task with rewards written for TRL and verl, and with verl's data files: rows from
Parquet and from a dataset saved with `save_to_disk`, `python -m service.check_reward`, and the
refusals before a run (`rewards/styles.py`, `service/tasks/text_files.py`)."""

from __future__ import annotations

import json

import pytest

from service.check_reward import main as check_reward
from service.config import load_config
from service.tasks import build_task
from service.train import main as train

pytest.importorskip("trl.rewards")
EX = "examples.rewards.trl_verl"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def chat_rows(n):
    return [
        {"prompt": [{"role": "user", "content": f"think about {i}"}], "target": f"<think>{i}</think>{i}"}
        for i in range(n)
    ]


def verl_rows(n):
    """Rows as verl's data preprocessing writes them (gsm8k-like)."""
    return [
        {
            "data_source": "toy/add",
            "prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"{i}+1="}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            "extra_info": {"index": i, "split": "train"},
        }
        for i in range(n)
    ]


def sets(path, reward, *more):
    return [
        "task.name=text",
        f"task.path={path}",
        f"reward.user=[{{fn: '{reward}'}}]",
        "data.eval_size=2",
        *more,
    ]


def run_check(capsys, argv_sets, n=8):
    code = check_reward(["--preset", "smoke", "--n", str(n), *[a for s in argv_sets for a in ("--set", s)]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_trls_think_format_reward_through_check_reward(tmp_path, capsys):
    path = write_jsonl(tmp_path / "train.jsonl", chat_rows(12))
    code, out, err = run_check(capsys, sets(path, "trl.rewards:think_format_reward"))
    assert code == 0, out + err
    assert "statuses:     ok 8" in out and "verdict:      a run would accept" in out


def test_a_trl_reward_returning_none_gives_skipped_items_counted(tmp_path, capsys):
    rows = [{"prompt": ("?" if i % 2 else "") + f"q{i}", "target": "abcde"} for i in range(12)]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    code, out, err = run_check(capsys, sets(path, f"{EX}:judged_reward"))
    assert "skipped " in out and "ok " in out, out + err
    # what it logged with log_metric, per call (one item each here), as a run reports it
    assert "log_metric:   judged mean 1 in [1, 1] (8 calls)" in out, out


def test_the_pairs_carry_the_prompt_for_a_trl_reward(tmp_path):
    task = build_task(
        load_config(
            "smoke", overrides=sets(write_jsonl(tmp_path / "t.jsonl", chat_rows(8)), f"{EX}:reverse_reward")
        )
    )
    pair = task.training_pairs(lambda line: None)[0]
    assert pair.prompt.startswith("think about") and pair.fields["prompt"][0]["role"] == "user"
    results = task.scorer().score_batch(["0 tuoba kniht", "x"], [None, None], [pair.fields] * 2)
    assert [r.status for r in results] == ["ok", "ok"]


def test_a_column_the_trl_reward_needs_and_the_data_lacks_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"prompt": f"p{i}", "target": "t"} for i in range(8)])
    with pytest.raises(
        ValueError, match=r"reward.user: '.*:needs_solution' takes 'solution', which .*train.jsonl:1 lacks"
    ):
        build_task(load_config("smoke", overrides=sets(path, f"{EX}:needs_solution")))


@pytest.mark.parametrize(
    ("reward", "style", "message"),
    [
        (f"{EX}:reverse_reward", "item", "style: item calls fn(completion, target) once per item"),
        (f"{EX}:compute_score", "trl", "takes no 'completions' (nor **kwargs)"),
    ],
)
def test_the_driver_refuses_a_style_that_does_not_fit_with_exit_2_and_one_line(
    tmp_path, capsys, reward, style, message
):
    from trl.rewards import get_soft_overlong_punishment

    from rewards import register_reward, unregister_reward

    register_reward("overlong", get_soft_overlong_punishment(20, 5), replace=True)
    path = write_jsonl(tmp_path / "train.jsonl", chat_rows(8))
    argv = sets(path, reward)
    argv[2] = f"reward.user=[{{fn: '{reward}', style: {style}}}]"
    code = train(
        ["--preset", "smoke", "--run-dir", str(tmp_path / "run"), *[a for s in argv for a in ("--set", s)]]
    )
    unregister_reward("overlong")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err, err
    assert not (tmp_path / "run").exists()


def test_verl_parquet_rows_and_compute_score(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    pq.write_table(pa.Table.from_pylist(verl_rows(12)), tmp_path / "train.parquet")
    path = str(tmp_path / "train.parquet")
    task = build_task(load_config("smoke", overrides=sets(path, f"{EX}:compute_score_dict")))
    pairs = task.training_pairs(lambda line: None)
    assert len(pairs) == 10 and all(
        p.prompt.endswith("+1=") and p.target == str(int(p.prompt[:-3]) + 1) for p in pairs
    )
    assert pairs[0].fields["data_source"] == "toy/add" and pairs[0].fields["extra_info"]["split"] == "train"
    code, out, err = run_check(capsys, sets(path, f"{EX}:compute_score_dict"))
    assert code == 0 and "ok 8" in out, out + err  # the targets score 1, the rest 0: all ok
    # the dict's `acc` is a part of the reward, shown beside it (and averaged by each step)
    assert f"{EX}:compute_score_dict/acc mean 0.25 in [0, 1] (8 items)" in out, out


def test_a_dataset_saved_to_disk(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(verl_rows(12)).save_to_disk(str(tmp_path / "ds"))
    code, out, err = run_check(capsys, sets(str(tmp_path / "ds"), f"{EX}:async_compute_score"))
    assert code == 0 and "ok 8" in out, out + err
    datasets.DatasetDict({"train": datasets.Dataset.from_list(verl_rows(4))}).save_to_disk(
        str(tmp_path / "dd")
    )
    with pytest.raises(
        ValueError, match=r"task.path: .*dd: holds the splits train; point the key at one split"
    ):
        build_task(load_config("smoke", overrides=sets(str(tmp_path / "dd"), f"{EX}:compute_score")))


def test_a_missing_package_is_one_line_naming_it(tmp_path, monkeypatch):
    import service.tasks.text_files as text_files

    real = text_files.importlib.import_module

    def no_module(name):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name)

    monkeypatch.setattr(text_files.importlib, "import_module", no_module)
    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    with pytest.raises(
        ValueError, match=r"task.path: .*train.parquet: reading it needs pyarrow \(pip install pyarrow\)"
    ):
        build_task(
            load_config("smoke", overrides=sets(str(tmp_path / "train.parquet"), f"{EX}:compute_score"))
        )
