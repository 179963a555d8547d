"""`guess`: find a secret number in [low, high]; after each guess the environment answers.

    first observation   "guess 1-16\n"
    action              "8"             (a turn ends at a newline)
    observation         "lower\n"       (or "higher\n"; a correct guess ends the episode)

Reward: 1 for finding the number, minus 0.1 for each guess after the first; 0 when `tries` guesses
miss or an answer is not a number in the range (that ends the episode too). Bisection always finds
it within ceil(log2(high - low + 2)) guesses, so a policy has something to learn past guessing.
The warm start's demonstrations guess at random among the numbers still possible: a good strategy,
not the best one.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from rewards.env.base import Environment, StepResult

HIGHER, LOWER = "higher\n", "lower\n"


class GuessNumber(Environment):
    deterministic = True
    alphabet = "0123456789-\nguesshigherlower "
    low, high, tries = 1, 16, 5

    def reset(self, row: Mapping[str, Any]) -> str:
        self.secret = int(row["secret"])
        self.low, self.high = int(row.get("low", self.low)), int(row.get("high", self.high))
        self.tries = int(row.get("tries", self.tries))
        if not self.low <= self.secret <= self.high:
            raise ValueError(f"secret {self.secret} is outside [{self.low}, {self.high}]")
        self.guesses = 0
        return f"guess {self.low}-{self.high}\n"

    def step(self, action: str) -> StepResult:
        self.guesses += 1
        text = action.strip()
        if not text.isdigit() or not self.low <= int(text) <= self.high:
            return StepResult("", 0.0, True, {"ended": "not a guess in range"})
        guess = int(text)
        if guess == self.secret:
            return StepResult("", round(1.0 - 0.1 * (self.guesses - 1), 6), True)
        if self.guesses >= self.tries:
            return StepResult("", 0.0, True, {"ended": "out of tries"})
        return StepResult(HIGHER if guess < self.secret else LOWER, 0.0, False)

    def episode_info(self) -> dict[str, int]:
        return {"guesses": getattr(self, "guesses", 0)}  # 0: it never started

    @classmethod
    def generate_row(cls, index: int, seed: int) -> dict[str, int]:
        rng = random.Random(f"guess:{seed}:{index}")
        return {"secret": rng.randint(cls.low, cls.high)}

    @classmethod
    def demonstration(cls, row: Mapping[str, Any], rng: random.Random) -> list[str]:
        """Guesses drawn at random among the numbers the answers so far leave possible."""
        low, high = int(row.get("low", cls.low)), int(row.get("high", cls.high))
        secret, tries = int(row["secret"]), int(row.get("tries", cls.tries))
        actions: list[str] = []
        while len(actions) < tries:
            guess = rng.randint(low, high)
            actions.append(str(guess))
            if guess == secret:
                break
            low, high = (guess + 1, high) if guess < secret else (low, guess - 1)
        return actions
