"""Stop strings: a completion ends at the first of a task's stop strings, as it ends at EOS.

The sampler stops rows at EOS only; stop strings are applied to the sampled rollout afterwards,
for every tokenizer alike (a stop string may span tokens, or end inside one):

- the text the scorer sees ends just before the first stop string (the string is not part of it);
- the row's completion mask ends at the token that completes that stop string: the tokens up to
  and including it are trained on (so the policy learns to emit the stop), those after are masked
  out of the loss, their log-probs zeroed and their ids replaced by PAD, exactly as after an EOS.

"The token that completes it" is the shortest prefix of the row whose decoded text contains a stop
string, found by bisection (decoding a longer prefix never removes text a shorter one had).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainer.policy.attention import positions_from_mask
from trainer.sampling.rollout import Rollout


def first_stop(text: str, stop: Sequence[str]) -> int | None:
    """Index in `text` where the earliest stop string starts; None when none occurs."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return min(found) if found else None


def _stop_length(ids: list[int], tokenizer, stop: Sequence[str]) -> int:
    """The shortest prefix of `ids` (which contains a stop string) whose text contains one."""
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if first_stop(tokenizer.decode(ids[:mid]), stop) is None:
            lo = mid + 1
        else:
            hi = mid
    return lo


def apply_stop_strings(rollout: Rollout, tokenizer, stop: Sequence[str]) -> tuple[Rollout, list[str]]:
    """(rollout ending each row at its first stop string, each row's text for the scorer).

    Rows without a stop string are unchanged and decode as they would without stop strings.
    """
    rows = rollout.completion_ids.cpu().tolist()
    lengths = rollout.completion_mask.sum(1).cpu().tolist()  # tokens up to and including EOS
    texts, keep = [], list(lengths)
    for r, (ids, length) in enumerate(zip(rows, lengths, strict=True)):
        ids = ids[:length]
        text = tokenizer.decode(ids)
        if not stop or first_stop(text, stop) is None:
            texts.append(text)
            continue
        keep[r] = _stop_length(ids, tokenizer, stop)
        prefix = tokenizer.decode(ids[: keep[r]])
        texts.append(prefix[: first_stop(prefix, stop)])
    if keep == lengths:
        return rollout, texts
    return _cut(rollout, torch.tensor(keep), tokenizer.pad_id), texts


def _cut(rollout: Rollout, keep: torch.Tensor, pad_id: int) -> Rollout:
    """The rollout with row r's completion ending after keep[r] tokens."""
    mask = rollout.completion_mask
    columns = torch.arange(mask.shape[1], device=mask.device)
    completion_mask = mask & (columns.unsqueeze(0) < keep.to(mask.device).unsqueeze(1))  # [N, L]
    p = rollout.prompt_len
    input_ids = rollout.input_ids.clone()
    input_ids[:, p:] = input_ids[:, p:].masked_fill(~completion_mask, pad_id)
    attn_mask = torch.cat([rollout.attn_mask[:, :p], completion_mask], dim=1)
    return rollout._replace(
        input_ids=input_ids,
        attn_mask=attn_mask,
        position_ids=positions_from_mask(attn_mask),
        completion_mask=completion_mask,
        old_logprobs=rollout.old_logprobs.masked_fill(~completion_mask, 0.0),
    )
