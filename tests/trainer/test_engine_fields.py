"""The trainer hands each item's data fields to the scorer, ends completions at stop strings and
samples k completions per held-out pair for pass@k."""

import torch

from trainer.config import TrainerConfig
from trainer.data.pairs import FieldPair, Pair
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.policy.char_tokenizer import CharTokenizer

TOK = CharTokenizer("0123456789+=;")
ROWS = [FieldPair(f"{a}+{b}=", str(a + b), {"a": a, "b": b}) for a, b in [(1, 2), (3, 4), (5, 1), (2, 2)]]


def cfg(**grpo) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "seed": 0,
            "sampling": {"group_size": 4, "max_new_tokens": 8, "prompts_per_microbatch": 2},
            "grpo": {"prompts_per_step": 4, **grpo},
        }
    )


class Spy:
    """A scorer that records what it was given and rewards completions starting with the sum."""

    def __init__(self):
        self.calls = []

    def __call__(self, completions, targets, fields=None):
        self.calls.append((list(completions), list(targets), fields))
        rows = fields or [{} for _ in completions]
        return [
            float(c.startswith(str(r.get("a", 0) + r.get("b", 0))))
            for c, r in zip(completions, rows, strict=True)
        ]


def test_grpo_step_sends_each_items_fields_once_per_completion():
    spy = Spy()
    Trainer(cfg(), TOK).grpo_step(ROWS, InlineRewards(spy))
    fields = [f for _, _, chunk in spy.calls for f in chunk]
    assert fields == [r.fields for r in ROWS for _ in range(4)]
    assert [t for _, targets, _ in spy.calls for t in targets] == [r.target for r in ROWS for _ in range(4)]


def test_pairs_without_fields_are_scored_with_two_arguments():
    seen = []
    Trainer(cfg(), TOK).grpo_step(
        [Pair(r.prompt, r.target) for r in ROWS],
        InlineRewards(lambda c, t: seen.append(len(c)) or [0.0] * len(c)),
    )
    assert sum(seen) == 16


def test_stop_strings_end_the_text_the_scorer_sees():
    trainer = Trainer(cfg(), TOK, stop=[";"])
    torch.manual_seed(0)
    spy = Spy()
    for _ in range(3):
        trainer.grpo_step(ROWS, InlineRewards(spy))
    texts = [c for completions, _, _ in spy.calls for c in completions]
    assert all(";" not in c for c in texts)
    plain = Trainer(cfg(), TOK)  # the same policy and seed without the stop string samples some ';'
    plain_spy = Spy()
    for _ in range(3):
        plain.grpo_step(ROWS, InlineRewards(plain_spy))
    assert any(";" in c for completions, _, _ in plain_spy.calls for c in completions)


def test_evaluate_with_fields_no_targets_and_sampled_pass_at_k():
    trainer = Trainer(cfg(eval_k=3), TOK)
    spy = Spy()
    rows = [FieldPair(r.prompt, None, r.fields) for r in ROWS]
    out = trainer.evaluator.evaluate(rows, spy, n_samples=1, sample_k=3)
    assert out["exact_match"] is None and out["samples"][0]["target"] is None
    assert {"k", "pass_at_1", "pass_at_k", "mean_at_k"} <= set(out) and out["k"] == 3
    greedy, sampled = spy.calls
    assert greedy[2] == [r.fields for r in rows] and sampled[2] == [r.fields for r in rows for _ in range(3)]
    again = trainer.evaluator.evaluate(rows, Spy(), sample_k=3)
    assert again == {**out, "samples": again["samples"]}  # sampled figures repeat at the same step
    assert 0.0 <= out["pass_at_1"] <= out["pass_at_k"] <= 1.0
