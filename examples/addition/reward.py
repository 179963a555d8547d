"""The addition example's reward: a plain Python function of the completion and the row's operands.

It takes `completion` and the row fields `a` and `b` by name (the `text` task hands each reward the
fields it names). Scores:
- 1.0: the completion is the sum, written as a plain decimal number;
- 0.5 x the share of digits right: a number, but not the sum; digits are compared from the right
  (units with units) over the longer of the two numbers, so a near miss earns more than a wild one;
- 0.0: anything else (empty, letters, signs, spaces inside).
"""

from __future__ import annotations


def addition_reward(completion: str, a: int, b: int) -> float:
    expected = str(a + b)
    if completion == expected:
        return 1.0
    if not completion.isascii() or not completion.isdigit():
        return 0.0
    width = max(len(completion), len(expected))
    got, want = completion.rjust(width), expected.rjust(width)
    return 0.5 * sum(g == w for g, w in zip(got, want, strict=True)) / width
