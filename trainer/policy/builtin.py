"""The built-in policy: the bundled GPT with the character tokenizer of the task's alphabet."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from trainer.config import SamplingConfig
from trainer.model_config import BuiltinModelConfig
from trainer.policy.base import Reference, Step, frozen_copy
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.policy.gpt_decoding import cached_decoder, full_decoder


class BuiltinPolicy:
    """A GPT and its CharTokenizer behind the `Policy` interface."""

    positions_key = "model.block_size"

    def __init__(self, model: GPT, tokenizer: CharTokenizer) -> None:
        if tokenizer.vocab_size != model.vocab_size:
            raise ValueError(
                f"tokenizer vocab_size {tokenizer.vocab_size} != model vocab_size {model.vocab_size}"
            )
        self.module, self.tokenizer = model, tokenizer

    @classmethod
    def create(cls, cfg: BuiltinModelConfig, tokenizer: CharTokenizer, seed: int) -> BuiltinPolicy:
        """Freshly initialised weights drawn from `seed` (the global RNG is left untouched)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return cls(GPT(cfg, tokenizer.vocab_size), tokenizer)

    @property
    def vocab_size(self) -> int:
        return self.module.vocab_size

    @property
    def max_positions(self) -> int:
        return self.module.config.block_size

    @property
    def width(self) -> int:
        return self.module.config.n_embd

    @property
    def shared_prefix(self) -> bool:
        return self.module.config.shared_prefix

    def set_attention(self, implementation: str) -> None:
        self.module.set_attention(implementation)

    def decoder(self, ids: Tensor, mask: Tensor, cfg: SamplingConfig, max_len: int) -> tuple[Tensor, Step]:
        make = cached_decoder if cfg.use_kv_cache else full_decoder
        return make(self.module, ids, mask, cfg, max_len)

    def reference(self, on_cpu: bool) -> Reference:
        return frozen_copy(self.module, on_cpu)

    def export(self, out_dir: str | Path, merge: bool = False) -> Path:
        raise NotImplementedError(
            "the built-in GPT is exported by its checkpoints (model.safetensors); a transformers export "
            "is made for model.source=hf"
        )
