"""Environments a run must refuse before it starts, and ones that fail on purpose mid-run (named as
`tests.service.env_cases:<Class>`)."""

import os
import signal
import threading
import time
from pathlib import Path

import ray

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


class DuckTyped:
    """reset and step, but not an Environment (no stop, alphabet or the other defaults)."""

    def reset(self, row):
        return "guess 1-16\n"

    def step(self, action):
        return "", 1.0, True


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


class AggregatesBadly(GuessNumber):
    """Its own aggregate_metrics expects a key its episodes never report."""

    @staticmethod
    def aggregate_metrics(infos):
        return {"solved": sum(info["solved"] for info in infos)}


class AggregatesGuesses(GuessNumber):
    """Its own aggregate_metrics: how many episodes, and the most guesses one took."""

    @staticmethod
    def aggregate_metrics(infos):
        return {"episodes": len(infos), "most_guesses": max(info["guesses"] for info in infos)}


class KillsItsWorker(GuessNumber):
    """The guessing game, which SIGKILLs its reward worker in the middle of an episode: at a step
    after the episode's first (so a replacement must replay its actions), when $GRPO_TEST_KILL_DIR
    names a directory. Only the pool's first worker (actor `<prefix>-0`) is killed: the call it dies
    under goes to the other worker, which never does, as a worker killed from outside would see
    it (a second death under the same call would rightly make its items suspects). Each kill claims
    a file `kill-<k>` there (at most `kills`), at least `every_s` after the last, in a process up
    for `min_age_s` (a replacement serves first). Without the variable it is the guessing game, so
    an undisturbed run is the reference of a killed one."""

    kills, every_s, min_age_s = 3, 1.5, 1.0
    loaded_at = time.monotonic()

    def step(self, action):
        if self.guesses >= 1 and self._claim_a_kill():
            os.kill(_LOADED_BY[0], signal.SIGKILL)  # the worker (the step runs in a child of it)
        return super().step(action)

    def _claim_a_kill(self) -> bool:
        folder = os.environ.get("GRPO_TEST_KILL_DIR")
        if not folder or time.monotonic() - self.loaded_at < self.min_age_s:
            return False
        if not _LOADED_BY[1].endswith("-0"):
            return False  # the driver (it plays demonstrations) or the other worker
        claimed = sorted(Path(folder).glob("kill-*"))
        if len(claimed) >= self.kills or (
            claimed and time.time() - claimed[-1].stat().st_mtime < self.every_s
        ):
            return False
        Path(folder, f"kill-{len(claimed)}").touch()
        return True


# The process that imported this module (a reward worker imports it before it forks the child its
# environments run in) and its actor's name ('' outside an actor), read here where Ray is at hand.
_LOADED_BY = (
    os.getpid(),
    (ray.get_runtime_context().get_actor_name() or "") if ray.is_initialized() else "",
)


class UndeterministicKillsItsWorker(KillsItsWorker):
    deterministic = False


__all__ = [
    "AggregatesBadly",
    "AggregatesGuesses",
    "DuckTyped",
    "Environment",
    "HangsOnBadGuesses",
    "HangsOnItsSecondTurn",
    "HangsWithoutDemonstration",
    "KillsItsWorker",
    "LiesAboutDeterminism",
    "NoDemonstration",
    "NotAnEnvironment",
    "ResetRaises",
    "StepRaises",
    "UndeterministicKillsItsWorker",
]


class QuickChess(ChessPlay):
    """chess-play with a small node budget: its warm start's demonstrations cost milliseconds."""

    engine = EngineConfig(nodes=64)
    moves = 2


class UndeterministicGuess(GuessNumber):
    """The guessing game, not declared deterministic: a lost episode cannot be replayed."""

    deterministic = False


class HangsOnItsSecondTurn(GuessNumber):
    """The guessing game whose second step never returns (a read that blocks for ever)."""

    def step(self, action):
        if self.guesses >= 1:
            threading.Event().wait()
        return super().step(action)


class HangsWithoutDemonstration(NoDemonstration):
    """No demonstration (a trial plays one empty action per row), and every step hangs."""

    def step(self, action):
        threading.Event().wait()


class HangsOnBadGuesses(GuessNumber):
    """The guessing game whose step never returns when the action is not a number: its
    demonstrations (numbers) play through, a policy's other text hangs it."""

    def step(self, action):
        if not action.strip().isdigit():
            threading.Event().wait()
        return super().step(action)
