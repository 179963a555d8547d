"""Per-token log-probabilities and entropies of sequences under a model, in float32.

Used for the policy (the GRPO ratio), the frozen reference model (the KL term) and SFT-style
scoring. The temperature must be the one used at sampling time, so that at unchanged weights the
recomputed log-probs equal the rollout's `old_logprobs`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.sampling.rollout import Rollout


def _at_least_fp32(t: Tensor) -> Tensor:
    """float32, or float64 when `t` already is (hand-checked maths in float64 stay float64)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log softmax(logits)[target] `[B, T]` float32 (float64 for float64 logits) for logits `[B, T, V]`."""
    logits = _at_least_fp32(logits)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy `[B, T]` float32 of softmax(logits) for logits `[B, T, V]`."""
    logp = torch.log_softmax(_at_least_fp32(logits), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def completion_logprobs(
    model: nn.Module,
    rollout: Rollout,
    temperature: float,
    *,
    entropy: bool = True,
    shared_prefix: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs `[N, L]` and entropies `[N, L]` (float32) of the rollout's completion tokens.

    One forward pass over input_ids with the rollout's attn_mask and position_ids; logits are
    divided by `temperature` as at sampling time. Positions outside completion_mask are 0.
    `model` is a GPT or any wrapper with its forward signature (DDP, torch.compile).
    Gradients flow into the log-probs when called outside no_grad (the policy); the entropy is a
    metric, computed without autograd; `entropy=False` skips it (None; the reference pass).
    Only the L positions that predict completion tokens go through the lm-head (`logits_to_keep`).
    shared_prefix: the model takes `shared_prefix=(K, P)` (`Policy.shared_prefix`); a rollout of
    whole groups then runs each group's prompt once.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    p = rollout.prompt_len
    length = rollout.input_ids.shape[1] - p
    if p < 1 or length < 1:
        raise ValueError(f"rollout needs a prompt (P={p}) and at least one completion token")
    # The last token's prediction is never needed: feed all but the last column; position p-1+j
    # predicts completion token j, so the last L positions are the ones with a use.
    share = shared_prefix and rollout.group_size > 1 and length > 1  # else the prompt is all it would run
    groups = {"shared_prefix": (rollout.group_size, p)} if share else {}
    logits = model(
        rollout.input_ids[:, :-1],
        rollout.position_ids[:, :-1],
        rollout.attn_mask[:, :-1],
        logits_to_keep=length,
        **groups,
    )
    logits = _at_least_fp32(logits) / temperature  # [N, L, V]
    keep = rollout.completion_mask
    logp = token_logprobs(logits, rollout.input_ids[:, p:]).masked_fill(~keep, 0.0)
    if not entropy:
        return logp, None
    with torch.no_grad():
        ent = token_entropy(logits).masked_fill(~keep, 0.0)
    return logp, ent
