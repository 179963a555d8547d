"""What FSDP shards one by one: the policy's transformer blocks, then the root the decoder calls.

The built-in GPT: each `Block` of `transformer.h`, then the GPT (embeddings, final norm and the
tied head stay in the root's group). A `transformers` model: each decoder layer (the classes its
`_no_split_modules` names: `LlamaDecoderLayer`, `GPT2Block`, ...), then the transformers model (under
peft's wrapper with LoRA). The hf root is the model the policy's decoder and forward call, not the
`HFCausalLM` wrapper around it: FSDP takes the first module run forward as the root, and decoding
calls the transformers model directly.
"""

from __future__ import annotations

from torch import nn

from trainer.policy.gpt import GPT


class UnshardableModelError(ValueError):
    """The policy has no blocks FSDP can shard one by one."""


def shard_units(module: nn.Module) -> tuple[list[nn.Module], nn.Module]:
    """(the blocks, sharded one by one, the root, sharded last) of a policy's module: a `GPT` or an
    `HFCausalLM` (a copy of either, for the KL reference, too)."""
    if isinstance(module, GPT):
        return list(module.transformer.h), module
    model = getattr(module, "model", None)  # HFCausalLM's transformers model
    if not isinstance(model, nn.Module):
        raise UnshardableModelError(
            f"scaling.strategy=fsdp shards the built-in GPT or a transformers model; got {type(module).__name__}"
        )
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in base.modules() if type(m).__name__ in names]
    if not layers:
        raise UnshardableModelError(
            f"scaling.strategy=fsdp shards a transformers model per decoder layer, and {type(base).__name__} "
            "names none (its _no_split_modules is empty); use scaling.strategy=ddp"
        )
    return layers, model
