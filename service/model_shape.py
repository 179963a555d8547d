"""The policy's shape for the memory plan, read from a copy on torch's meta device (no weights).

    shape = model_shape(cfg, vocab)   # parameters, what trains, the blocks fsdp shards one by one

The built-in GPT is built from `model` on the meta device with the task's vocabulary; a
`transformers` model from its config.json alone (`AutoConfig`, `from_config`), with LoRA adapters
added by peft as a run adds them: every count is the run's own, and nothing is downloaded or
allocated. The blocks are the ones the fsdp strategy shards (`trainer.strategy.units`), so a model
whose decoder layers it cannot find is refused here, before a run starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from service.config import ServiceConfig


@dataclass(frozen=True)
class ModelShape:
    """What the memory plan reads of a policy."""

    params: int  # every parameter (a tied matrix once)
    trainable: int  # what the optimiser holds (with LoRA: the adapters)
    largest_block: int  # parameters of the largest block (what fsdp gathers at a time)
    root: int  # parameters outside the blocks (embeddings, final norm, head): the root's group
    layers: int
    width: int  # hidden size
    mlp_width: int
    heads: int
    kv_width: int  # keys or values per token and layer (kv heads x head size)
    vocab: int
    reference_copy: bool  # the KL reference is a copy (else: the policy with its adapter off)
    unshardable: str | None = None  # why fsdp cannot shard it per block (None: it can)
    gated_mlp: bool = False  # a gate and an up projection (SwiGLU: Llama, Qwen, Mistral), else one


def _counts(module: nn.Module) -> tuple[int, int, int, int, str | None]:
    """(params, trainable, largest block, root) of a (meta) policy module, and why fsdp could
    not shard it (None when it can)."""
    from trainer.strategy.units import UnshardableModelError, shard_units

    params = list(module.parameters())  # a tied matrix once
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    try:
        blocks, _ = shard_units(module)
    except UnshardableModelError as exc:
        return total, trainable, total, total, str(exc)
    sizes = [sum(p.numel() for p in b.parameters()) for b in blocks]
    return total, trainable, max(sizes), total - sum(sizes), None


def _builtin(cfg: ServiceConfig, vocab: int) -> ModelShape:
    import torch

    from trainer.policy.gpt import GPT

    m = cfg.model
    with torch.device("meta"):
        module = GPT(m, vocab)
    total, trainable, block, root, why = _counts(module)
    return ModelShape(
        total, trainable, block, root, m.n_layer, m.n_embd, 4 * m.n_embd, m.n_head, m.n_embd, vocab,
        reference_copy=True, unshardable=why,
    )  # fmt: skip


def hf_model_config(cfg: ServiceConfig):
    """The transformers config of the run's model: its config.json, or the tiny model's (made in
    the run directory when model.path is unset, perhaps not yet)."""
    from pathlib import Path

    from transformers import AutoConfig

    from service.run_dir import TINY_MODEL_DIR

    path, m = cfg.model.path, cfg.model
    if path is None or (Path(path).name == TINY_MODEL_DIR and not (Path(path) / "config.json").is_file()):
        from trainer.policy.hf_tiny import char_tokenizer, model_config

        return model_config("llama", char_tokenizer())
    return AutoConfig.from_pretrained(path, revision=m.revision, trust_remote_code=m.trust_remote_code)


def _hf(cfg: ServiceConfig) -> ModelShape:
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.policy.hf import HFCausalLM

    config = hf_model_config(cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=cfg.model.trust_remote_code)
        lora = cfg.model.lora
        if lora is not None:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(
                model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, target_modules=lora.target_modules,
                                  task_type="CAUSAL_LM"),
            )  # fmt: skip
    total, trainable, block, root, why = _counts(HFCausalLM(model))
    width = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    head_size = int(getattr(config, "head_dim", None) or width // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    mlp = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * width
    copy = lora is None or cfg.model.reference == "adapter"
    gated = any(name.rsplit(".", 1)[-1] == "gate_proj" for name, _ in model.named_modules())
    return ModelShape(
        total, trainable, block, root, int(config.num_hidden_layers), width, int(mlp), heads,
        kv_heads * head_size, int(config.vocab_size), reference_copy=copy, unshardable=why, gated_mlp=gated,
    )  # fmt: skip


def model_shape(cfg: ServiceConfig, vocab: int | None = None) -> ModelShape:
    """The run's policy shape; vocab: the built-in GPT's (its tokenizer's size)."""
    if cfg.model.source == "hf":
        return _hf(cfg)
    if vocab is None:
        raise ValueError("the built-in GPT's shape needs its vocabulary size")
    return _builtin(cfg, vocab)
