"""The policy interface and its implementations: the built-in GPT (nanoGPT-shaped) with its
character tokenizer and KV cache, and a `transformers` causal LM (`trainer.policy.hf`, imported
only for model.source=hf)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.policy.attention import attention_mask, positions_from_mask
from trainer.policy.base import Policy, PolicyTokenizer, PromptFormat, Reference
from trainer.policy.builtin import BuiltinPolicy
from trainer.policy.char_tokenizer import SPECIAL_TOKENS, CharTokenizer, UnknownCharacterError
from trainer.policy.gpt import GPT
from trainer.policy.kv_cache import KVCache

if TYPE_CHECKING:
    from trainer.config import TrainerConfig


def build_policy(
    cfg: TrainerConfig, tokenizer: CharTokenizer | None = None, prompt_format: PromptFormat | None = None
) -> Policy:
    """The run's policy: the built-in GPT over `tokenizer` (weights drawn from cfg.seed), or the
    `transformers` model of cfg.model.path rendered with `prompt_format` (new LoRA adapters drawn
    from cfg.seed)."""
    if cfg.model.source == "hf":
        from trainer.policy.hf import HFPolicy

        return HFPolicy.load(cfg.model, prompt_format, seed=cfg.seed)
    if tokenizer is None:
        raise ValueError("the built-in policy needs the task's CharTokenizer")
    return BuiltinPolicy.create(cfg.model, tokenizer, cfg.seed)


__all__ = [
    "GPT",
    "SPECIAL_TOKENS",
    "BuiltinPolicy",
    "CharTokenizer",
    "KVCache",
    "Policy",
    "PolicyTokenizer",
    "PromptFormat",
    "Reference",
    "UnknownCharacterError",
    "attention_mask",
    "build_policy",
    "positions_from_mask",
]
