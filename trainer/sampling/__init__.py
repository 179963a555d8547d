"""Sampling K completions per prompt, the typed rollout it returns, and per-token log-probs."""

from trainer.sampling.logprobs import completion_logprobs, token_entropy, token_logprobs
from trainer.sampling.rollout import Rollout, completions_text
from trainer.sampling.sampler import decode_step, generate, left_pad, release_static_cache, sample_tokens

__all__ = [
    "Rollout",
    "completion_logprobs",
    "completions_text",
    "decode_step",
    "generate",
    "left_pad",
    "release_static_cache",
    "sample_tokens",
    "token_entropy",
    "token_logprobs",
]
