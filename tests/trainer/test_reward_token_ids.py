"""Rewards that take token ids (TRL's completion_ids) get each row's sampled ids with its fields."""

from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, small_cfg
from trainer.data.pairs import TOKEN_IDS_FIELD, FieldPair, row_fields
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.sampling.rollout import completion_token_ids


class Recorded:
    """A scorer that records what it is given and scores every completion 0."""

    def __init__(self):
        self.calls: list[tuple[list[str], list]] = []

    def __call__(self, completions, targets, fields=None):
        self.calls.append((list(completions), list(fields) if fields is not None else None))
        return [0.0] * len(completions)


def test_each_row_goes_to_the_rewards_with_its_sampled_ids_in_training_and_evaluation():
    seen = Recorded()
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER, reward_token_ids=True)
    rollouts, _ = trainer.rollouts.sample(PAIRS, InlineRewards(seen))
    texts = [t for completions, _ in seen.calls for t in completions]
    rows = [f for _, fields in seen.calls for f in fields]
    assert [r[TOKEN_IDS_FIELD] for r in rows] == [i for r in rollouts for i in completion_token_ids(r)]
    assert [CHESS_TOKENIZER.decode(r[TOKEN_IDS_FIELD]) for r in rows] == texts  # the ids of the text scored
    assert all(r[TOKEN_IDS_FIELD] for r in rows)
    seen.calls.clear()
    trainer.evaluator.evaluate(PAIRS, seen, sample_k=2)
    (greedy, greedy_rows), (sampled, sampled_rows) = seen.calls
    assert len(greedy_rows) == len(PAIRS) and len(sampled_rows) == 2 * len(PAIRS)
    for completions, fields in seen.calls:
        assert [CHESS_TOKENIZER.decode(f[TOKEN_IDS_FIELD]) for f in fields] == completions


def test_without_reward_token_ids_nothing_is_added():
    seen = Recorded()
    Trainer(small_cfg(), CHESS_TOKENIZER).rollouts.sample(PAIRS, InlineRewards(seen))
    assert all(fields is None for _, fields in seen.calls)  # plain pairs carry no fields


def test_row_fields_keep_each_pairs_fields_beside_the_ids():
    pairs = [FieldPair("p", "t", {"a": 1}), FieldPair("q", "u", {"a": 2})]
    rows = row_fields(pairs, 2, [[1], [2], [3], [4]])
    assert rows == [
        {"a": 1, TOKEN_IDS_FIELD: [1]},
        {"a": 1, TOKEN_IDS_FIELD: [2]},
        {"a": 2, TOKEN_IDS_FIELD: [3]},
        {"a": 2, TOKEN_IDS_FIELD: [4]},
    ]
    assert pairs[0].fields == {"a": 1}  # the pair's own dict is left as it was
    assert row_fields(pairs, 1) == [{"a": 1}, {"a": 2}]
