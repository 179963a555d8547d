"""Bad input for an hf run: exit 2 and one line naming the key, before anything starts."""

from __future__ import annotations

import json
import sys
import time

import pytest

pytest.importorskip("transformers")

from service.train import main  # noqa: E402
from trainer.policy.hf_tiny import write_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"), "gpt2", positions=96)


def _refused(tmp_path, capsys, *sets: str) -> str:
    args = ["--preset", "hf-smoke", "--run-dir", str(tmp_path / "run")]
    began = time.monotonic()
    assert main([*args, *(a for s in sets for a in ("--set", s))]) == 2
    assert time.monotonic() - began < 30
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
