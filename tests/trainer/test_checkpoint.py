"""Checkpoints: atomic save, verified load, fallback past a corrupt one, bitwise resume."""

import json
import logging

import pytest
import torch

from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS
from trainer.checkpoint import list_checkpoints, load_checkpoint, load_latest, save_checkpoint
from trainer.config import TrainerConfig
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards

CFG = TrainerConfig.model_validate(
    {
        "seed": 5,
        "model": {"dropout": 0.1},  # dropout draws from torch's global RNG: resume must restore it
        "sampling": {"group_size": 4, "max_new_tokens": 6, "prompts_per_microbatch": 2},
        "grpo": {"beta": 0.05, "passes": 2},
        "sft": {"warmup_steps": 3},
        "optim": {"lr": 1e-3, "warmup_steps": 2},
    }
)


def char_match(completions, targets):
    return [
        sum(a == b for a, b in zip(c, t, strict=False)) / len(t)
        for c, t in zip(completions, targets, strict=True)
    ]


def test_round_trip_restores_weights_ties_and_extra(tmp_path):
    trainer = Trainer(CFG, CHESS_TOKENIZER)
    trainer.sft_step(PAIRS)
    trainer.grpo_step(PAIRS, InlineRewards(char_match))
    path = save_checkpoint(tmp_path, 7, trainer.state_dict(), {"data_position": 123})
    assert path.name == "step_000007"
    state, step = load_latest(tmp_path)
    assert step == 7 and state["extra"] == {"data_position": 123}
    assert state["trainer"]["config"] == CFG.model_dump(mode="json")
    other = Trainer(CFG, CHESS_TOKENIZER)
    other.load_state_dict(state["trainer"])
    for (name, a), b in zip(
        trainer.model.state_dict().items(), other.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    assert other.model.lm_head.weight is other.model.transformer.wte.weight
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["ties"]["model"] == {"lm_head.weight": "transformer.wte.weight"}
    assert other.grpo_steps == 1 and other.sft_steps == 1 and other.ref_model is not None


def _save_three(tmp_path):
    trainer = Trainer(CFG, CHESS_TOKENIZER)
    for step in (1, 2, 3):
        trainer.sft_step(PAIRS)
        save_checkpoint(tmp_path, step, trainer.state_dict(), {"step": step}, keep_last=2)
    return trainer


def test_keeps_the_last_n(tmp_path):
    _save_three(tmp_path)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 2]


@pytest.mark.parametrize("damage", ["flip", "truncate", "no_manifest", "missing_file"])
def test_corrupt_latest_falls_back_with_a_warning(tmp_path, caplog, damage):
    _save_three(tmp_path)
    latest = tmp_path / "step_000003"
    target = latest / "model.safetensors"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        (latest / "state.pt").write_bytes((latest / "state.pt").read_bytes()[:100])
    elif damage == "no_manifest":
        (latest / "manifest.json").unlink()
    else:
        target.unlink()
    with caplog.at_level(logging.WARNING, logger="trainer.checkpoint"):
        state, step = load_latest(tmp_path)
    assert step == 2 and state["extra"] == {"step": 2}
    assert "step_000003" in caplog.text and "cannot be loaded" in caplog.text


def test_nothing_loadable_gives_none(tmp_path):
    assert load_latest(tmp_path / "absent") is None
    (tmp_path / "step_000001").mkdir()
    (tmp_path / ".tmp-step_000002-99").mkdir()  # a save that crashed before its rename
    assert load_latest(tmp_path) is None


def test_save_replaces_same_step_and_cleans_crashed_saves(tmp_path):
    trainer = Trainer(CFG, CHESS_TOKENIZER)
    (tmp_path / ".tmp-step_000001-99").mkdir(parents=True)
    save_checkpoint(tmp_path, 1, trainer.state_dict(), {"v": 1})
    save_checkpoint(tmp_path, 1, trainer.state_dict(), {"v": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001"]
    assert load_checkpoint(tmp_path / "step_000001")[1] == {"v": 2}


def _continue(trainer: Trainer, scorer) -> list[dict]:
    out = [trainer.grpo_step(PAIRS, scorer) for _ in range(2)]
    out.append(trainer.sft_step(PAIRS))
    return out


def test_resumed_run_equals_uninterrupted_run_bitwise(tmp_path):
    scorer = InlineRewards(char_match)
    torch.manual_seed(11)
    trainer = Trainer(CFG, CHESS_TOKENIZER)
    for _ in range(2):
        trainer.sft_step(PAIRS)
    trainer.grpo_step(PAIRS, scorer)
    save_checkpoint(tmp_path, 3, trainer.state_dict(), {})
    straight = _continue(trainer, scorer)

    torch.manual_seed(999)  # a different process state: everything must come from the checkpoint
    resumed_trainer = Trainer(CFG, CHESS_TOKENIZER)
    state, _ = load_latest(tmp_path)
    resumed_trainer.load_state_dict(state["trainer"])
    resumed = _continue(resumed_trainer, scorer)

    timing = {"sample_s", "ref_s", "reward_wait_s", "update_s", "step_time_s", "completions_per_s"}
    for a, b in zip(straight, resumed, strict=True):
        assert {k: v for k, v in a.items() if k not in timing} == {
            k: v for k, v in b.items() if k not in timing
        }
    for (name, a), b in zip(
        trainer.model.state_dict().items(), resumed_trainer.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    for phase in ("sft", "grpo"):
        sa = trainer.optimizer(phase).optimizer.state_dict()["state"]
        sb = resumed_trainer.optimizer(phase).optimizer.state_dict()["state"]
        for i in sa:
            for k in sa[i]:
                assert torch.equal(sa[i][k], sb[i][k]), (phase, i, k)
