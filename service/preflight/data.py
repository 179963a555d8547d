"""Every record the run will train or be evaluated on must tokenize and fit, before anything starts.

A record that parses but cannot be used (a character outside the built-in tokenizer's alphabet, more
positions than `model.block_size`) means the data and the config disagree: the run is refused with
the first such record as `file:line: reason` and the count of the others, never skipped silently and
never found at the step whose shuffle first reaches it.

Positions, with the built-in character tokenizer: SFT needs `BOS prompt SEP target EOS` minus one
(the last token is only predicted); sampling needs `BOS prompt SEP` plus `sampling.max_new_tokens`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from service.config_keys import ConfigError

# The longest SAN move is 7 characters ("exd8=Q+", "Qh4xe1#"); plies are joined by one space.
MAX_SAN_CHARS = 7
SPECIALS_AROUND_PROMPT = 2  # BOS and SEP
SFT_EXTRA = 2  # BOS + SEP + EOS, less the last token, which is only predicted


@dataclass(frozen=True)
class FitLimits:
    """What a record must fit: the model's positions, the completion budget, which phases run."""

    block_size: int
    max_new_tokens: int
    sft: bool  # training targets are teacher-forced
    grpo: bool  # training prompts are sampled from

    @classmethod
    def of(cls, cfg: Any) -> FitLimits | None:
        """The built-in model's limits; None for a `transformers` model, whose tokenizer and
        positions `service.model_checks` checks instead."""
        if getattr(cfg.model, "source", "builtin") != "builtin":
            return None
        return cls(cfg.model.block_size, cfg.sampling.max_new_tokens, cfg.sft.steps > 0, cfg.grpo.steps > 0)

    def sampled(self, prompt_chars: int) -> str | None:
        need = prompt_chars + SPECIALS_AROUND_PROMPT + self.max_new_tokens
        if need <= self.block_size:
            return None
        return (
            f"prompt of {prompt_chars} characters + BOS/SEP + sampling.max_new_tokens "
            f"({self.max_new_tokens}) = {need} positions exceeds model.block_size ({self.block_size})"
        )

    def taught(self, prompt: str, target: str) -> str | None:
        need = len(prompt) + len(target) + SFT_EXTRA
        if need <= self.block_size:
            return None
        return f"BOS + prompt + SEP + target needs {need} positions, more than model.block_size ({self.block_size})"


def record_problem(
    prompt: str, target: str | None, limits: FitLimits, alphabet: str | None, *, train: bool
) -> str | None:
    """Why one record cannot be used, or None. `alphabet`: the built-in tokenizer's (None: not checked)."""
    if alphabet is not None:
        allowed = set(alphabet)
        for name, text in (("prompt", prompt), ("target", target or "")):
            bad = next((i for i, c in enumerate(text) if c not in allowed), None)
            if bad is not None:
                return f"{name} character {text[bad]!r} at position {bad} is not in the tokenizer's alphabet"
    if limits.grpo or not train:  # held-out prompts are always sampled from
        if problem := limits.sampled(len(prompt)):
            return problem
    if train and limits.sft and target is not None:
        return limits.taught(prompt, target)
    return None


def check_records(
    key: str,
    records: Iterable[tuple[str, str, str | None]],
    limits: FitLimits | None,
    alphabet: str | None,
    *,
    train: bool,
) -> None:
    """ConfigError naming `key`, the first unusable record ("where: reason") and how many more."""
    if limits is None:
        return
    first, count = None, 0
    for where, prompt, target in records:
        problem = record_problem(prompt, target, limits, alphabet, train=train)
        if problem is not None:
            count += 1
            first = first or f"{where}: {problem}"
    if first is not None:
        more = f" (and {count - 1} more records)" if count > 1 else ""
        raise ConfigError(f"{key}: {first}{more}; every record must tokenize and fit before the run starts")


def check_generated_games(max_plies: int, limits: FitLimits | None) -> None:
    """Generated games: the longest possible prompt (every ply the longest SAN move) must fit."""
    if limits is None:
        return
    longest = max(0, max_plies * (MAX_SAN_CHARS + 1) - 1)
    if problem := limits.sampled(longest):
        raise ConfigError(
            f"sampling.max_new_tokens: {limits.max_new_tokens} is too large: a {problem} (task.max_plies={max_plies})"
        )
