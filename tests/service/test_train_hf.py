"""`python -m service.train` with a transformers policy end to end: the run ends with `export/`,
which transformers alone loads and which greedily completes the final evaluation's prompts as
eval.jsonl records; for the preset's own tiny model, for a GPT-2 and a Llama directory this test
writes with transformers itself, and on the `text` task."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from examples.addition.make_data import make, write_jsonl  # noqa: E402
from examples.addition.reward import addition_reward  # noqa: E402
from service.export import main as export_main  # noqa: E402
from service.run_files import read_jsonl  # noqa: E402
from tests.service.train_child import assert_ran, run_train, shared_env  # noqa: E402
from trainer.checkpoint import load_checkpoint  # noqa: E402

pytestmark = pytest.mark.slow
SAMPLES = 16  # every held-out prompt of the smoke preset is recorded with its completion


def _train(run_dir: Path, *sets: str) -> subprocess.CompletedProcess:
    # fp32 whatever the CPU (auto is bf16 with AMX): the export, run by transformers in fp32, must
    # complete as the run's own evaluation did
    sets = (f"run.eval_samples={SAMPLES}", "precision.dtype=fp32", *sets)
    return run_train("--preset", "hf-smoke", "--run-dir", str(run_dir), sets=sets, env=shared_env())


def _own_model(path: Path, arch: str) -> Path:
    """A model and a character tokenizer made with transformers and tokenizers directly (no PAD
    token: the run must add one)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    chars = sorted({chr(c) for c in range(32, 127)})
    vocab = {t: i for i, t in enumerate(["<s>", "</s>", "<unk>", *chars])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    ids = {"bos_token_id": 0, "eos_token_id": 1}
    if arch == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=len(vocab), n_positions=160, n_embd=64, n_layer=2, n_head=2, **ids
        )
    else:
        config = transformers.LlamaConfig(
            vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=160, **ids,
        )  # fmt: skip
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _greedy_matches_eval(run_dir: Path) -> None:
    """The export, loaded by transformers alone, completes each final held-out prompt greedily
    exactly as the run's evaluation recorded."""
    export = run_dir / "export"
    tok = transformers.AutoTokenizer.from_pretrained(export)
    model = transformers.AutoModelForCausalLM.from_pretrained(export).eval()
    final = [e for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "final"][-1]
    assert len(final["samples"]) == SAMPLES
    cfg = json.loads((export / "config.json").read_text())
    assert cfg["eos_token_id"] == tok.eos_token_id and tok.pad_token_id not in (None, tok.eos_token_id)
    for sample in final["samples"]:
        ids = tok(sample["prompt"], return_tensors="pt")
        out = model.generate(**ids, do_sample=False, max_new_tokens=72, pad_token_id=tok.pad_token_id)
        text = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        assert text == sample["completion"], sample["prompt"]


@pytest.mark.parametrize("arch", [None, "gpt2", "llama"])
def test_hf_run_exports_a_model_that_completes_as_the_final_eval(tmp_path, arch):
    # The tiny model runs through Ray Train; the others in process (run.backend=local: the same
    # loop and records, without Ray Train's ~13 s start-up).
    sets = [] if arch is None else [f"model.path={_own_model(tmp_path / arch, arch)}", "run.backend=local"]
    result = _train(tmp_path / "run", *sets)
    assert_ran(result)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["steps"] == 10
    assert (tmp_path / "run" / "export" / "model.safetensors").is_file()
    _greedy_matches_eval(tmp_path / "run")
    if arch is None:  # the export command, from an earlier checkpoint: that step's weights
        assert export_main([str(tmp_path / "run"), "--step", "8", "--out", str(tmp_path / "at8")]) == 0
        assert export_main([str(tmp_path / "run"), "--step", "3", "--out", str(tmp_path / "x")]) == 2
        state, _ = load_checkpoint(tmp_path / "run" / "checkpoints" / "step_000008")
        exported = load_file(tmp_path / "at8" / "model.safetensors")
        assert exported and all(torch.equal(state["model"][f"model.{k}"], v) for k, v in exported.items())


def test_text_task_with_the_hf_policy(tmp_path):
    train, held = make(seed=3, digits=2, train=200, held_out=16)
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "eval.jsonl", held)
    result = _train(
        tmp_path / "run",
        "task.name=text", f"task.path={tmp_path / 'train.jsonl'}", f"task.eval_path={tmp_path / 'eval.jsonl'}",
        "task.stop=['+']", "reward.user=[{fn: 'examples.addition.reward:addition_reward'}]",
        "sampling.max_new_tokens=6", "run.backend=local", "logging.rollouts_every=1",
    )  # fmt: skip
    assert_ran(result)
    rollouts = read_jsonl(tmp_path / "run" / "rollouts.jsonl")
    assert rollouts
    for row in rollouts:  # the recorded completion is the text that was scored (the tokenizer's decode)
        a, b = map(int, row["prompt"].removesuffix("=").split("+"))
        assert row["reward"] == addition_reward(row["completion"].strip(), a, b), row
    evals = read_jsonl(tmp_path / "run" / "eval.jsonl")
    assert all(e["count"] == 16 and e["valid_rate"] == 1.0 for e in evals)
    assert all("+" not in s["completion"] for e in evals for s in e["samples"])
    assert (tmp_path / "run" / "export" / "config.json").is_file()
