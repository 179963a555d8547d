"""Bad input for an hf run: exit 2 and one line naming the key, before anything starts."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("transformers")

from service.train import main  # noqa: E402
from trainer.policy.hf_tiny import write_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"), "gpt2", positions=96)


def _refused(tmp_path, capsys, *sets: str) -> str:
    args = ["--preset", "hf-smoke", "--run-dir", str(tmp_path / "run")]
    # refused before Ray starts: in the unit tier, starting it would fail the test (tests/tiers.py)
    assert main([*args, *(a for s in sets for a in ("--set", s))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not (tmp_path / "run").exists(), err
    return err


def test_a_path_without_a_model(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert "model.path" in _refused(tmp_path, capsys, f"model.path={tmp_path / 'empty'}")


def test_remote_code_needs_trust(tmp_path, capsys, tiny):
    remote = tmp_path / "remote"
    remote.mkdir()
    config = json.loads((tiny / "config.json").read_text())
    config.update(model_type="my_own_lm", auto_map={"AutoConfig": "modeling.MyConfig"})
    (remote / "config.json").write_text(json.dumps(config))
    assert "model.trust_remote_code" in _refused(tmp_path, capsys, f"model.path={remote}")


def test_chat_template_without_one(tmp_path, capsys, tiny):
    (tiny / "chat_template.jinja").unlink(missing_ok=True)
    err = _refused(tmp_path, capsys, f"model.path={tiny}", "task.chat_template=true")
    assert "task.chat_template" in err


def test_lora_without_peft(tmp_path, capsys, tiny, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # what `import peft` meets where it is not installed
    err = _refused(tmp_path, capsys, f"model.path={tiny}", "model.lora={r: 4}")
    assert "model.lora" in err and ".[lora]" in err


def test_prompt_and_new_tokens_beyond_the_model_positions(tmp_path, capsys, tiny):
    err = _refused(tmp_path, capsys, f"model.path={tiny}", "sampling.max_new_tokens=90")
    assert "sampling.max_new_tokens" in err and "96 positions" in err


def _submit(monkeypatch, *sets: str) -> int:
    """`client submit` to an address where nothing listens: 2 is a refusal here, 3 a request made."""
    from pathlib import Path

    from test_client_cli import closed_port_address

    from service.client.cli import main as client_main

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    argv = ["submit", "--address", closed_port_address(), "--preset", "hf-smoke"]
    return client_main([*argv, *(a for s in sets for a in ("--set", s))])


def test_submit_checks_a_model_folder_that_is_here(tmp_path, capsys, monkeypatch, tiny):
    (tmp_path / "empty").mkdir()
    assert _submit(monkeypatch, f"model.path={tmp_path / 'empty'}") == 2
    assert "model.path" in capsys.readouterr().err
    assert _submit(monkeypatch, f"model.path={tiny}", "sampling.max_new_tokens=90") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sampling.max_new_tokens" in err and "96 positions" in err


def test_submit_leaves_a_hub_id_to_the_cluster(capsys, monkeypatch):
    assert _submit(monkeypatch, "model.path=some-org/some-model") == 3  # checked, then the request
    assert "some-org/some-model" not in capsys.readouterr().err


def test_text_rows_with_characters_the_tokenizer_lacks(tmp_path, capsys, tiny):
    """The tiny model's character tokenizer has no CJK: a text-task run over such rows stops before
    it starts, in one line giving the count, the field and the first row, and the key that allows it."""
    from examples.addition.make_data import make, write_jsonl

    train, held = make(seed=3, digits=2, train=40, held_out=8)
    for i in (5, 9):
        train[i] = {**train[i], "prompt": "加法 " + train[i]["prompt"]}
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "eval.jsonl", held)
    err = _refused(
        tmp_path, capsys, f"model.path={tiny}", "task.name=text", f"task.path={tmp_path / 'train.jsonl'}",
        f"task.eval_path={tmp_path / 'eval.jsonl'}", "reward.user=[{fn: 'examples.addition.reward:addition_reward'}]",
    )  # fmt: skip
    assert "error: model.unknown_tokens: " in err and "2 prompts of" in err, err
    assert f"training row 5, prompt '{train[5]['prompt']}'" in err, err
    assert (
        "'加' at character 0 encodes as the unknown token '<unk>'" in err
        and "model.unknown_tokens=allow" in err
    )
