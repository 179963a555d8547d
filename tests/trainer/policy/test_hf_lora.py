"""LoRA on the transformers policy: only the adapter trains, the reference is the base model with
the adapter off (no copy), the merged export is base + adapter, and 2 gloo ranks update as 1."""

import pytest
import torch

pytest.importorskip("peft")

from tests.trainer.ranks import spawn_ranks  # noqa: E402
from trainer.config import TrainerConfig  # noqa: E402
from trainer.data.pairs import Pair  # noqa: E402
from trainer.engine import Trainer  # noqa: E402
from trainer.grpo.reward_source import Rewards  # noqa: E402
from trainer.policy import build_policy  # noqa: E402
from trainer.policy.hf import HFCausalLM, HFPolicy  # noqa: E402
from trainer.policy.hf_tiny import write_tiny_model  # noqa: E402
from trainer.sampling.logprobs import completion_logprobs  # noqa: E402
from trainer.sampling.sampler import completions_text, generate  # noqa: E402

PAIRS = [Pair(p, t) for p, t in [("e4", "ab"), ("d4", "cd"), ("c4", "ef"), ("Nf3", "gh")]]


def _cfg(path, lora: bool = True, **grpo) -> TrainerConfig:
    model = {"source": "hf", "path": str(path)}
    if lora:
        model["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    return TrainerConfig.model_validate(
        {
            "seed": 2, "model": model,
            "sampling": {"group_size": 4, "max_new_tokens": 6, "prompts_per_microbatch": 2},
            "grpo": {"beta": 0.05, "scale": "batch", "zero_var_groups": "keep", **grpo},
            "optim": {"lr": 1e-2}, "sft": {"lr": 1e-2, "warmup_steps": 0},
            "precision": {"dtype": "fp32"},  # compared exactly: fp32 whatever the CPU
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("llama"), "llama", positions=64, width=64)


def _rollouts(trainer: Trainer):
    """Rollouts of PAIRS (2 prompts per micro-batch) from a fixed generator, and varied rewards."""
    gen = torch.Generator().manual_seed(1)
    rollouts, values = [], []
    for i in range(0, len(PAIRS), 2):
        prompts = [trainer.tokenizer.encode_prompt(p.prompt) for p in PAIRS[i : i + 2]]
        r = generate(trainer.policy, prompts, trainer.cfg.sampling, generator=gen)
        rollouts.append(r)
        values.append([sum(c in "abcdefgh" for c in t) / 6 for t in completions_text(r, trainer.tokenizer)])
    return rollouts, values


def _update(trainer: Trainer, rollouts, values) -> dict:
    flat = [v for vs in values for v in vs]
    return trainer.grpo_update(
        rollouts, Rewards(values=flat, usable=[True] * len(flat), statuses=["ok"] * len(flat))
    )


def test_only_adapter_tensors_change_and_the_reference_is_the_base_model(base_dir):
    trainer = Trainer(_cfg(base_dir))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.sft_step(PAIRS)
    rollouts, values = _rollouts(trainer)
    _update(trainer, rollouts, values)
    changed = {k for k, v in trainer.model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all("lora_" in k for k in changed), sorted(changed)
    assert trainer.ref_model is None  # no copy: the policy itself with the adapter off
    assert {id(p) for g in trainer.optimizer("grpo").optimizer.param_groups for p in g["params"]} == {
        id(p) for n, p in trainer.model.named_parameters() if "lora_" in n
    }
    base = HFCausalLM(HFPolicy.load(_cfg(base_dir, lora=False).model).model).eval()
    with torch.no_grad():
        # the reference pass runs each group's prompt once (model.shared_prefix), so the base does too
        expected = [completion_logprobs(base, r, 1.0, shared_prefix=True)[0] for r in rollouts]
        adapted = [completion_logprobs(trainer.model.eval(), r, 1.0)[0] for r in rollouts]
    for ref, want, with_adapter in zip(trainer.reference_logprobs(rollouts), expected, adapted, strict=True):
        # through the cache under peft's wrapper the last bit may differ (1.2e-7 seen), no more
        torch.testing.assert_close(ref, want, rtol=0, atol=1e-6)
        assert (with_adapter - want).abs().max() > 1e-4  # the adapter did change the policy


def test_merged_export_equals_base_plus_adapter(base_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer = Trainer(_cfg(base_dir))
    trainer.sft_step(PAIRS)
    merged_dir = trainer.policy.export(tmp_path / "merged", merge=True)
    adapter_dir = trainer.policy.export(tmp_path / "adapter")
    assert (adapter_dir / "adapter_config.json").is_file() and (merged_dir / "model.safetensors").is_file()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    ids = torch.tensor([trainer.tokenizer.encode_pair("e4 e5", "rnbqkbnr")[0]])
    with torch.no_grad():
        want = trainer.policy.model.eval()(input_ids=ids).logits
        got = merged(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert "lora" not in " ".join(merged.state_dict())


def _grads(trainer: Trainer) -> dict:
    return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


def _rank(rank: int, world: int, path: str, out: str) -> None:
    cfg = _cfg(path, lora=False)
    trainer = Trainer(cfg, policy=build_policy(cfg))
    sft = trainer.sft_step(PAIRS)
    sft_grads = _grads(trainer)
    trainer = Trainer(cfg, policy=build_policy(cfg))
    rollouts, values = _rollouts(trainer)
    mine = slice(rank * len(rollouts) // world, (rank + 1) * len(rollouts) // world)
    grpo = _update(trainer, rollouts[mine], values[mine])
    if rank == 0:
        torch.save({"sft_grads": sft_grads, "grpo_grads": _grads(trainer), "sft": sft, "grpo": grpo}, out)


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process_on_the_hf_path(base_dir, tmp_path):
    single, double = str(tmp_path / "single.pt"), str(tmp_path / "double.pt")
    _rank(0, 1, str(base_dir), single)
    spawn_ranks(_rank, str(tmp_path / "rdv"), (str(base_dir), double))
    a, b = torch.load(single), torch.load(double)
    assert a["sft"]["loss"] == pytest.approx(b["sft"]["loss"], rel=1e-5)
    assert a["grpo"]["loss"] == pytest.approx(b["grpo"]["loss"], rel=1e-4, abs=1e-6)
    for phase in ("sft_grads", "grpo_grads"):
        assert a[phase].keys() == b[phase].keys() and a[phase]
        for name, g in a[phase].items():
            torch.testing.assert_close(b[phase][name], g, rtol=1e-4, atol=1e-7, msg=f"{phase} {name}")


def test_a_saved_adapter_starts_the_policy_and_can_be_the_frozen_reference(base_dir, tmp_path):
    first = Trainer(_cfg(base_dir))
    first.sft_step(PAIRS)
    adapter = first.policy.export(tmp_path / "adapter")
    cfg = _cfg(base_dir).model_dump(mode="json")
    cfg["model"].update(adapter_path=str(adapter), reference="adapter")
    trainer = Trainer(TrainerConfig.model_validate(cfg))
    rollouts, values = _rollouts(trainer)
    with torch.no_grad():
        start = [completion_logprobs(trainer.model.eval(), r, 1.0)[0] for r in rollouts]
        saved = [completion_logprobs(first.model.eval(), r, 1.0)[0] for r in rollouts]
    for a, b in zip(start, saved, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)  # the policy starts from the saved adapter
    _update(trainer, rollouts, values)
    assert trainer.ref_model is not None  # a frozen copy holding the starting adapter
    for ref, want in zip(trainer.reference_logprobs(rollouts), start, strict=True):
        torch.testing.assert_close(ref, want, rtol=0, atol=1e-6)
