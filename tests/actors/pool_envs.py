"""Environments the pool's episode tests play on real reward workers (importable as `pool_envs`)."""

import os
import time

from rewards.env import Environment, StepResult


class Counting(Environment):
    """Deterministic: answers each action with a running count; done at `turns`; rewards lengths."""

    deterministic = True

    def reset(self, row):
        self.turns, self.count = int(row["turns"]), 0
        return f"start {row['turns']}"

    def step(self, action):
        if action == "hang":
            time.sleep(60)
        self.count += len(action)
        done = self.count >= 3 * self.turns
        return StepResult("" if done else f"count {self.count}", float(len(action)), done)


class Drifting(Counting):
    """Not deterministic: its answers carry the process id."""

    deterministic = False

    def step(self, action):
        observation, reward, done = super().step(action)
        return StepResult(observation and f"{observation} pid {os.getpid()}", reward, done)
