"""The typed result of sampling: K completions for each of B prompts, N = B*K rows."""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from trainer.policy.char_tokenizer import CharTokenizer


class Rollout(NamedTuple):
    """Sampled sequences, ready for scoring and for the GRPO loss.

    Rows are laid out group after group: prompt b owns rows b*K .. b*K+K-1. L is the number of
    decoding steps actually run (at most max_new_tokens; fewer when every row stopped early).
    """

    input_ids: Tensor  # [N, P+L] long: left-padded prompt, then completion (PAD after EOS)
    attn_mask: Tensor  # [N, P+L] bool: real tokens (prompt pads and tokens after EOS are False)
    position_ids: Tensor  # [N, P+L] long: counts real tokens (pads get 0 / repeat the last)
    completion_mask: Tensor  # [N, L] bool: sampled tokens up to and including EOS
    old_logprobs: (
        Tensor  # [N, L] float32: log p(token) at sampling time, logits / temperature; 0 where masked
    )
    prompt_len: int  # P
    group_size: int  # K; 1 for a selection of rows (`select_rows`), which need not form groups

    @property
    def completion_ids(self) -> Tensor:
        """`[N, L]` the completion part of input_ids."""
        return self.input_ids[:, self.prompt_len :]

    @property
    def num_rows(self) -> int:
        return self.input_ids.shape[0]


def completions_text(rollout: Rollout, tokenizer: CharTokenizer) -> list[str]:
    """Each row's completion decoded up to (not including) its EOS."""
    return [tokenizer.decode(row, stop_at_eos=True) for row in rollout.completion_ids.cpu().tolist()]


def completion_token_ids(rollout: Rollout) -> list[list[int]]:
    """Each row's sampled completion ids up to and including its EOS (as TRL gives completion_ids)."""
    ids, mask = rollout.completion_ids.cpu().tolist(), rollout.completion_mask.cpu().tolist()
    return [[t for t, m in zip(row, keep, strict=True) if m] for row, keep in zip(ids, mask, strict=True)]
