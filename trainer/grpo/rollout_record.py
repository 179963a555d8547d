"""Training completions as rows a person reads: what the policy wrote for a prompt, the reward it
got and what the update made of it (`logging.rollouts_every`, written to rollouts.jsonl).

    rows = rollout_rows(rollouts, prompts, scored, shaped, sel, groups=4, texts_of=decode)

One row per completion of the step's first `groups` prompt groups on this rank, in row order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from trainer.grpo.reward_source import Rewards
from trainer.grpo.selection import GroupSelection
from trainer.sampling.rollout import Rollout

if TYPE_CHECKING:
    from trainer.grpo.shaping import Shaped


def rollout_rows(
    rollouts: Sequence[Rollout],
    prompts: Sequence[str],
    scored: Rewards,
    shaped: Shaped,
    sel: GroupSelection,
    groups: int,
    texts_of: Callable[[Rollout], list[str]],
) -> list[dict[str, Any]]:
    """Rows of {group, sample, prompt, completion, reward (None where it could not be used),
    status, shaped_reward (after overlong or KL shaping; only where shaping changed it), advantage,
    in_loss, tokens, truncated, log_extra (what TRL-style rewards logged for it; only where they
    did)} for the first `groups` groups (prompts[g] is group g's prompt)."""
    wanted = min(groups, len(prompts)) * (rollouts[0].group_size if rollouts else 0)
    rows: list[dict[str, Any]] = []
    for rollout in rollouts:
        if len(rows) >= wanted:
            break
        take = min(rollout.num_rows, wanted - len(rows))
        texts = texts_of(rollout)[:take]
        lengths = rollout.completion_mask[:take].sum(dim=1).tolist()
        for text, tokens in zip(texts, lengths, strict=True):
            i, k = len(rows), rollout.group_size
            row = {
                "group": i // k,
                "sample": i % k,
                "prompt": prompts[i // k],
                "completion": text,
                "reward": scored.values[i] if scored.usable[i] else None,
                "status": scored.statuses[i],
                "advantage": round(float(sel.advantages[i]), 6),
                "in_loss": bool(sel.row_weight[i] > 0),
                "tokens": int(tokens),
                "truncated": bool(shaped.truncated[i]),
            }
            if float(shaped.delta[i]) != 0.0:
                row["shaped_reward"] = shaped.rewards.values[i]
            if extra := scored.extras.get(i):  # what TRL-style rewards logged with log_extra
                row["log_extra"] = extra
            rows.append(row)
    return rows
