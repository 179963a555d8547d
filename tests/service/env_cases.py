"""Environments a run must refuse before it starts (named as `tests.service.env_cases:<Class>`)."""

from rewards.config import EngineConfig
from rewards.env import Environment
from rewards.env.chess_play import ChessPlay
from rewards.env.guess import GuessNumber


class ResetRaises(GuessNumber):
    def reset(self, row):
        raise KeyError("secret")


class NoDemonstration(GuessNumber):
    @classmethod
    def demonstration(cls, row, rng):
        return None


class NotAnEnvironment:
    pass


class StepRaises(GuessNumber):
    def step(self, action):
        raise RuntimeError("the engine went away")


class LiesAboutDeterminism(GuessNumber):
    """Declares itself deterministic, but its answers change from one play to the next."""

    plays = 0

    def reset(self, row):
        LiesAboutDeterminism.plays += 1
        return super().reset(row)

    def step(self, action):
        observation, reward, done = super().step(action)
        return (observation.upper() if LiesAboutDeterminism.plays % 2 else observation, reward, done)


__all__ = [
    "Environment",
    "LiesAboutDeterminism",
    "NoDemonstration",
    "NotAnEnvironment",
    "ResetRaises",
    "StepRaises",
]


class QuickChess(ChessPlay):
    """chess-play with a small node budget: its warm start's demonstrations cost milliseconds."""

    engine = EngineConfig(nodes=64)
    moves = 2


class UndeterministicGuess(GuessNumber):
    """The guessing game, not declared deterministic: a lost episode cannot be replayed."""

    deterministic = False
