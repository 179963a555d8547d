"""A reward tried on the driver before anything starts, and measured: `RewardTrial`.

The sample is built from the run's own data: each pair's target as a completion (a perfect answer),
then a damaged copy of it, the empty string and the prompt (answers a policy does write). Each item
is scored in a daemon thread, so a reward that hangs is reported once it passes its deadline
instead of hanging the check.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.pool.worker_watch import capture_output
from rewards import Scorer, ScoreResult
from rewards.result import ERROR
from rewards.reward_log import take_logged_metrics
from rewards.styles import TOKEN_IDS
from rewards.user_reward import is_reported


@dataclass(frozen=True)
class TrialItem:
    completion: str
    target: str | None
    fields: dict[str, Any] | None


def sample_items(
    pairs: Sequence[Any], n: int, encode: Callable[[str], list[int] | None] | None = None
) -> list[TrialItem]:
    """`n` items from pairs spread over the data, the completion taking turns: the target, half of
    it, '' and the prompt. encode: for rewards that take token ids, each completion's ids
    (`service.preflight.token_ids`), given in the item's fields as a run gives them."""
    items: list[TrialItem] = []
    for i in range(n if pairs else 0):
        pair = pairs[(i * len(pairs)) // n] if n <= len(pairs) else pairs[i % len(pairs)]
        target = pair.target
        text = target if isinstance(target, str) else ""
        completion = (text, text[: len(text) // 2], "", pair.prompt)[i % 4]
        fields = getattr(pair, "fields", None)
        ids = encode(completion) if encode is not None else None
        if ids is not None:
            fields = {**(fields or {}), TOKEN_IDS: ids}
        items.append(TrialItem(completion, target, fields))
    return items


@dataclass
class TrialResult:
    """What scoring the sample showed: cost per item, statuses, errors, determinism."""

    costs_s: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # reason -> count
    differing: int = 0  # items whose two scores differ
    repeats: int = 1
    hung: float | None = None  # seconds waited for an item that did not finish
    hung_at: int | None = None  # that item's index in the sample
    hung_completion: str = ""  # and its completion
    output: str = ""  # the first bytes the rewards printed (captured, as on a reward worker)
    output_bytes: int = 0  # every byte they printed
    # The scorer's named components (`Scorer.component_names`): name -> its values, one per item that has it.
    components: dict[str, list[float]] = field(default_factory=dict)
    # What TRL-style rewards logged with log_metric: name -> the mean each scored item's call logged.
    logged: dict[str, list[float]] = field(default_factory=dict)

    @property
    def scored(self) -> int:
        return sum(self.statuses.values())

    @property
    def mean_cost(self) -> float:
        """Seconds per item on average: what a call's length grows by per item."""
        return statistics.fmean(self.costs_s) if self.costs_s else 0.0

    def stopped_at(self, index: int, item: TrialItem, deadline_s: float) -> TrialResult:
        """The trial ended at `item`, which did not return within `deadline_s`."""
        self.hung, self.hung_at, self.hung_completion = deadline_s, index, item.completion
        return self

    def hung_item(self) -> str:
        """'sample item 3 (completion 'e4 e5…')' for the item that did not return."""
        text = self.hung_completion if len(self.hung_completion) <= 40 else self.hung_completion[:40] + "…"
        return f"sample item {(self.hung_at or 0) + 1} (completion {text!r})"

    def cost(self, q: float) -> float:
        """The q-quantile of the cost per item, in seconds (0 without items)."""
        if not self.costs_s:
            return 0.0
        if len(self.costs_s) == 1:
            return self.costs_s[0]
        return statistics.quantiles(self.costs_s, n=100, method="inclusive")[
            min(98, max(0, round(q * 100) - 1))
        ]


def _same(a: ScoreResult, b: ScoreResult) -> bool:
    return a.status == b.status and a.total == b.total


def run_trial(
    scorer: Scorer, items: Sequence[TrialItem], *, deadline_s: float, repeats: int = 1, warm_up: bool = True
) -> TrialResult:
    """Score every item `repeats` times; stop at the first item that takes longer than `deadline_s`.

    The first item is scored once more before, untimed: what a reward sets up on its first call
    (an engine started, a model loaded) a worker pays once, not per item."""
    result = TrialResult(repeats=repeats)
    with capture_output() as output:  # a reward printing per item must not flood this console
        _trial(scorer, items, result, deadline_s, repeats, warm_up)
    result.output, result.output_bytes = output.text(), output.written
    return result


def _trial(
    scorer: Scorer,
    items: Sequence[TrialItem],
    result: TrialResult,
    deadline_s: float,
    repeats: int,
    warm_up: bool,
) -> TrialResult:
    named = tuple(getattr(scorer, "component_names", ()))
    result.components = {name: [] for name in named}
    if warm_up and items and _score_with_deadline(scorer, items[0], deadline_s) is None:
        return result.stopped_at(0, items[0], deadline_s)
    take_logged_metrics(scorer)  # the warm-up's
    for index, item in enumerate(items):
        outcomes = []
        for _ in range(repeats):
            done = _score_with_deadline(scorer, item, deadline_s)
            if done is None:
                return result.stopped_at(index, item, deadline_s)
            outcome, cost = done
            logged = take_logged_metrics(scorer)
            if not outcomes:
                for name, (total, count) in logged.items():
                    result.logged.setdefault(name, []).append(total / count)
            outcomes.append(outcome)
            result.costs_s.append(cost)
        first = outcomes[0]
        result.statuses[first.status] += 1
        for name, value in first.components.items():
            if is_reported(name, named):
                result.components.setdefault(name, []).append(value)
        if first.status == ERROR:
            result.errors[first.reason or "error"] += 1
        result.differing += any(not _same(first, other) for other in outcomes[1:])
    return result


def _score_with_deadline(
    scorer: Scorer, item: TrialItem, deadline_s: float
) -> tuple[ScoreResult, float] | None:
    box: list[tuple[ScoreResult, float]] = []

    def work() -> None:
        start = time.perf_counter()
        outcome = scorer.score(item.completion, item.target, item.fields)
        box.append((outcome, time.perf_counter() - start))

    thread = threading.Thread(target=work, name="reward-trial", daemon=True)
    thread.start()
    thread.join(deadline_s)
    return box[0] if box else None
