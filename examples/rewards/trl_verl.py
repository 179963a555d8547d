"""Rewards written for TRL's GRPOTrainer and for verl, used here unchanged (`docs/guides/coming-from-trl-verl.md`).

    reward: {user: [{fn: "examples.rewards.trl_verl:reverse_reward"}]}       # style: auto finds trl
    reward: {user: [{fn: "examples.rewards.trl_verl:compute_score"}]}        # style: auto finds verl

TRL style (one call per batch, lists in, a list of floats out):
- `reverse_reward(completions, **kwargs)`: 1.0 when a completion is its prompt reversed, else the
  share of its characters in the right place; logs the share reversed exactly through `log_metric`
  and each completion's expected text through `log_extra`.
- `judged_reward(completions, prompts, **kwargs)`: None (not scored) for a prompt that starts with
  "?", else the length-capped share `len(completion) / 10`; logs a metric through `log_metric`.
- `needs_solution(completions, solution, **kwargs)`: 1.0 when a completion equals the row's
  `solution` column.
- `async_reverse_reward`: `reverse_reward` as an `async def`.

verl style (one call per item):
- `compute_score(data_source, solution_str, ground_truth, extra_info=None)`: 1.0 for the ground
  truth, else 0.0.
- `compute_score_dict`: the same as a dict (`score`, `acc`), as verl's math scorers return it.
- `async_compute_score`: `compute_score` as an `async def`.
"""

from __future__ import annotations

import asyncio
from typing import Any


def _text(completion: Any) -> str:
    """A TRL completion: its text, or the content of its one assistant message (conversational data)."""
    return completion if isinstance(completion, str) else completion[0]["content"]


def _prompt_text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


def _reverse_score(completion: str, prompt: str) -> float:
    want = prompt[::-1]
    if completion == want:
        return 1.0
    right = sum(a == b for a, b in zip(completion, want, strict=False))
    return right / max(len(want), len(completion), 1)


def reverse_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    prompts = kwargs["prompts"]
    scores = [_reverse_score(_text(c), _prompt_text(p)) for c, p in zip(completions, prompts, strict=True)]
    if "log_metric" in kwargs:  # a step reports the mean of what its calls logged (reward_metrics)
        kwargs["log_metric"]("reversed_exactly", sum(s == 1.0 for s in scores) / max(len(scores), 1))
    if "log_extra" in kwargs:  # a column of the step's recorded completions (rollouts.jsonl)
        kwargs["log_extra"]("expected", [_prompt_text(p)[::-1] for p in prompts])
    return scores


async def async_reverse_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    await asyncio.sleep(0)
    return reverse_reward(completions, **kwargs)


def judged_reward(completions: list[Any], prompts: list[Any], **kwargs: Any) -> list[float | None]:
    kwargs["log_metric"]("judged", float(len(completions)))
    return [
        None if _prompt_text(p).startswith("?") else min(len(_text(c)) / 10, 1.0)
        for c, p in zip(completions, prompts, strict=True)
    ]


def needs_solution(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float]:
    return [float(_text(c) == s) for c, s in zip(completions, solution, strict=True)]


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    return 1.0 if solution_str.strip() == ground_truth.strip() else 0.0


def compute_score_dict(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None
) -> dict[str, float]:
    score = compute_score(data_source, solution_str, ground_truth, extra_info)
    return {"score": score, "acc": score}


async def async_compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None
) -> float:
    await asyncio.sleep(0)
    return compute_score(data_source, solution_str, ground_truth, extra_info)
