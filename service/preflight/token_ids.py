"""Token ids for the sample items a reward is tried on, when a reward takes them (TRL's
`completion_ids`): the run's own tokenizer encodes each sample completion and ends it with EOS, as
the sampler's ids end. Only the tokenizer is loaded (an hf model's, as the checks before an hf run
load it), never the weights."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Encoder = Callable[[str], list[int] | None]


def completion_encoder(cfg: Any, task: Any) -> Encoder:
    """text -> the ids a sampled completion with that text would have (None: it cannot be encoded)."""
    if cfg.model.source == "builtin":  # imported here: validating a config imports no torch
        from trainer.policy.char_tokenizer import CharTokenizer

        tok: Any = CharTokenizer(task.alphabet)
    else:
        from service.config import prompt_format
        from trainer.policy.hf import load_tokenizer
        from trainer.policy.hf_tokenizer import HFTokenizer

        tok = HFTokenizer(load_tokenizer(cfg.model), prompt_format(cfg))

    def encode(text: str) -> list[int] | None:
        try:
            return [*tok.encode_text(text), tok.eos_id]
        except ValueError:  # a character outside the built-in model's alphabet
            return None

    return encode


def encoder_if_needed(cfg: Any, task: Any, scorer: Any) -> Encoder | None:
    """The encoder when a reward of `scorer` takes token ids, else None."""
    return completion_encoder(cfg, task) if scorer.takes_token_ids else None
