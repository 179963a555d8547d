"""The policy: the built-in GPT (nanoGPT-shaped), its character tokenizer and its KV cache."""

from trainer.policy.char_tokenizer import SPECIAL_TOKENS, CharTokenizer, UnknownCharacterError
from trainer.policy.gpt import GPT, attention_mask, positions_from_mask
from trainer.policy.kv_cache import KVCache

__all__ = [
    "GPT",
    "SPECIAL_TOKENS",
    "CharTokenizer",
    "KVCache",
    "UnknownCharacterError",
    "attention_mask",
    "positions_from_mask",
]
