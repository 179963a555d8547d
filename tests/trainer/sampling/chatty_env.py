"""A small environment for the multi-turn sampler's tests: it answers every turn with a fixed text
until its row's number of turns, rewarding each action by its length."""

from rewards.env import Environment, StepResult

ANSWER = "ok;"


class Chatty(Environment):
    deterministic = True
    alphabet = "abcdefgh:;okq "

    def reset(self, row):
        self.left = int(row["turns"])
        return "q:"

    def step(self, action):
        self.left -= 1
        return StepResult("" if self.left <= 0 else ANSWER, float(len(action)), self.left <= 0)
