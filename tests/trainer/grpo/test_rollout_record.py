"""A GRPO step asked for its rollouts returns them as rows a person reads: each completion with its
prompt, the reward it got and what the update made of it (`Trainer.record_groups`)."""

from __future__ import annotations

import math

from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, char_match, small_cfg
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards


def _recording_scorer():
    seen: list[tuple[list[str], list[float]]] = []

    def score(completions, targets):
        values = char_match(completions, targets)
        seen.append((list(completions), values))
        return values

    return score, seen


def test_the_first_groups_come_back_as_rows_with_what_the_scorer_saw():
    trainer = Trainer(small_cfg(beta=0.0), CHESS_TOKENIZER)
    trainer.record_groups = 3
    score, seen = _recording_scorer()
    m = trainer.grpo_step(PAIRS, InlineRewards(score))
    rows, k = m["rollouts"], 4
    assert len(rows) == 3 * k  # three of the four groups
    completions = [c for chunk, _ in seen for c in chunk]
    values = [v for _, chunk in seen for v in chunk]
    for i, row in enumerate(rows):
        assert (row["group"], row["sample"]) == (i // k, i % k)
        assert row["prompt"] == PAIRS[i // k].prompt
        assert row["completion"] == completions[i] and row["reward"] == values[i]
        assert row["status"] == "ok" and 1 <= row["tokens"] <= 6 and isinstance(row["truncated"], bool)
        assert "shaped_reward" not in row  # no overlong penalty, no KL in the reward: unchanged
    for g in range(3):  # group-scaled advantages: centred in each group, in the loss when they vary
        group = rows[g * k : (g + 1) * k]
        rewards = [r["reward"] for r in group]
        assert math.isclose(sum(r["advantage"] for r in group), 0.0, abs_tol=1e-4)
        assert all(r["in_loss"] == (max(rewards) > min(rewards)) for r in group)


def test_rows_only_when_asked_and_the_shaped_reward_where_shaping_changed_it():
    trainer = Trainer(small_cfg(beta=0.0, overlong="penalty", overlong_buffer=4), CHESS_TOKENIZER)
    m = trainer.grpo_step(PAIRS, InlineRewards(_recording_scorer()[0]))
    assert "rollouts" not in m
    trainer.record_groups = 10  # more than the step has: all of them
    rows = trainer.grpo_step(PAIRS, InlineRewards(_recording_scorer()[0]))["rollouts"]
    assert len(rows) == 4 * 4 and any("shaped_reward" in row for row in rows)
    for row in rows:  # past max_new_tokens - buffer the penalty lowers the reward the update used
        if row["tokens"] > 6 - 4:
            assert row["shaped_reward"] < row["reward"]
        else:
            assert "shaped_reward" not in row


def test_a_row_carries_what_the_rewards_logged_for_its_completion():
    from trainer.grpo.reward_source import Rewards

    def score(completions, targets):  # each micro-batch logs its completions' lengths, item by item
        n = len(completions)
        extras = {i: {"chars": len(c)} for i, c in enumerate(completions) if i % 2 == 0}
        return Rewards(char_match(completions, targets), [True] * n, ["ok"] * n, extras=extras)

    trainer = Trainer(small_cfg(beta=0.0), CHESS_TOKENIZER)
    trainer.record_groups = 4
    rows = trainer.grpo_step(PAIRS, InlineRewards(score))["rollouts"]
    # micro-batches of whole groups (an even size): item i of the step is item i % 2 of its own
    assert [r.get("log_extra") for r in rows] == [
        {"chars": len(r["completion"])} if i % 2 == 0 else None for i, r in enumerate(rows)
    ]


def test_rewards_keep_each_items_logged_values_through_concat_and_slices():
    from trainer.grpo.reward_source import Rewards

    def part(n, extras):
        return Rewards([0.0] * n, [True] * n, ["ok"] * n, stats={"reward_items": float(n)}, extras=extras)

    whole = Rewards.concat([part(2, {1: {"a": 1}}), part(3, {0: {"a": 2}, 2: {"a": 3}})])
    assert whole.extras == {1: {"a": 1}, 2: {"a": 2}, 4: {"a": 3}}
    tail = whole.sliced(2, 5, sums=False)
    assert tail.extras == {0: {"a": 2}, 2: {"a": 3}} and tail.stats == {} and len(tail.values) == 3
    assert whole.sliced(0, 2, sums=True).stats == {"reward_items": 5.0}
