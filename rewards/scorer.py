"""The scorer of every task: named reward components, weighted, and the user rewards on top.

    scorer = Scorer([(FenValidity(), 0.25), (Similarity(), 0.5), (ExactMatch(), 0.25)], RewardConfig())
    scorer.score(completion, target).total

A task's reward is a list of `RewardComponent`s with their weights (the fen task's FEN validity,
Levenshtein similarity and exact match, `rewards.fen`; the move task's engine judgement,
`rewards.move`; the code task's tests, `rewards.code`; none for the text task) and the user rewards
of `RewardConfig.user`. For each item the scorer:

1. refuses an item that is not text (`bad_input`: a completion that is not a str, a target that is
   neither a str nor None, or None where a component needs the target);
2. cleans the completion (stripped, by default) and refuses one past `max_chars` (`too_long`, every
   component 0) before any parse or quadratic work;
3. asks each component for its `Part` (the values it reports, its reward, its status) and adds
   weight x reward to the total; the item's status is the first component's that is not `ok`;
4. adds weight x value of each user reward: one that raises or returns a non-number makes the item
   `error`, one that returns None `skipped` (no reward, never a 0).

`score` is the reference path. `score_batch` returns exactly what `score` returns item by item; it
lets each component use its memo for the batch (`RewardComponent.judge_in_batch`) and calls each
TRL-style user reward once over the batch. Neither ever raises on bad data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from rewards.config import RewardConfig
from rewards.registry import RewardSpecError
from rewards.result import BAD_INPUT, ERROR, OK, SKIPPED, TOO_LONG, ScoreResult
from rewards.reward_log import EXTRA_KEY, LOG_EXTRA, RewardLog, place_extras
from rewards.signature import RewardParams
from rewards.user_calls import UserRewards
from rewards.user_reward import Fields, RewardSkipped, UserReward, UserRewardError, part_components


class Part(NamedTuple):
    """What one component makes of one item."""

    components: dict[str, float]  # the values it reports, by name
    reward: float  # what it adds to the total, times its weight
    status: str = OK  # ok, or the usable status it gives the item (invalid, unparsable)


class RewardComponent(ABC):
    """One named part of a task's reward: an item (its cleaned completion, target and fields) -> a
    `Part`. Pure and picklable; one that holds a process (an engine) starts it in `setup`."""

    name: str  # what it is called (its weight's key in the task's config, where it has one)
    needs_target: bool = False  # the item's target must be text (None is bad input)

    @property
    def reports(self) -> tuple[str, ...]:
        """The components its parts hold (a too_long item reports each of them as 0)."""
        return (self.name,)

    @abstractmethod
    def judge(self, completion: str, target: Any, fields: Fields) -> Part:
        """The part of one item; raises only on a bug (the scorer counts it as an error)."""

    def judge_in_batch(self, completion: str, target: Any, fields: Fields) -> Part:
        """`judge` within `score_batch`: the same part, from a memo where the component keeps one."""
        return self.judge(completion, target, fields)

    def setup(self) -> None:  # noqa: B027 (most components hold nothing)
        """Start what it holds in this process (a reward worker calls this when it starts)."""

    def close(self) -> None:  # noqa: B027
        """Let go of what it holds in this process."""


class Weighted(NamedTuple):
    component: RewardComponent
    weight: float


def stripped(completion: str) -> str:
    """A completion as the components and user rewards see it: without surrounding whitespace."""
    return completion.strip()


class Scorer:
    """Scores completions by weighted reward components plus the user rewards of one `RewardConfig`."""

    def __init__(
        self,
        components: Sequence[tuple[RewardComponent, float]] = (),
        config: RewardConfig | None = None,
        *,
        clean: Callable[[str], str] = stripped,
        data_source: str = "text",
    ):
        """clean: the completion as everything scores it (default: stripped). data_source: what a
        verl-style reward is given as `data_source` when the item carries none (the task's name)."""
        if config is not None and not isinstance(config, RewardConfig):
            raise TypeError(
                f"config must be a RewardConfig (build_scorer takes a mapping), got {type(config).__name__}"
            )
        self.components = _weighted(components)
        self.config = config if config is not None else RewardConfig()
        self.users = UserRewards.resolve(self.config.user, data_source)
        self.clean = clean
        if not self.components and not self.users.rewards:
            raise ValueError("reward.user: a task scored by user rewards alone needs at least one")
        reported = {name for c in self.components for name in c.component.reports}
        clash = next((u.name for u in self.users.rewards if u.name in reported), None)
        if clash is not None:
            raise RewardSpecError(f"user reward {clash!r} clashes with a component of this task's reward")

    def setup(self) -> None:
        """Build each class reward and start each component once in this process (a reward worker
        calls this when it starts; otherwise it happens at the first score)."""
        self.users.setup()
        for c in self.components:
            c.component.setup()

    def close(self) -> None:
        """Let go of what the components and the class rewards hold in this process."""
        for c in self.components:
            c.component.close()
        self.users.close()

    @property
    def user_rewards(self) -> tuple[UserReward, ...]:
        return self.users.rewards

    @property
    def reward_log(self) -> RewardLog:
        """What TRL- and verl-style rewards logged in this process."""
        return self.users.reward_log

    @property
    def concurrent(self) -> bool:
        """True when a user reward is `async def` or asks for threads (`rewards.concurrent`)."""
        return self.users.concurrent

    @property
    def component_names(self) -> list[str]:
        """Names of the components of an `ok` / `invalid` / `unparsable` / `too_long` result."""
        return [*(name for c in self.components for name in c.component.reports), *self.users.names]

    @property
    def user_params(self) -> dict[str, RewardParams]:
        """How each user reward is called, by name: which arguments it takes (`rewards.signature`)."""
        return self.users.params

    @property
    def takes_token_ids(self) -> bool:
        """Whether a user reward is called with each completion's token ids (TRL's `completion_ids`):
        the trainer then sends them with every item."""
        return self.users.takes_token_ids

    def target_ok(self, target: Any) -> bool:
        """A target is text, or None when no component reads it."""
        if target is None:
            return not any(c.component.needs_target for c in self.components)
        return isinstance(target, str)

    def rewarded(self, completions: list[Any], targets: list[Any]) -> list[int]:
        """Indices of the items the user rewards see (the others end bad_input or too_long first)."""
        return [
            i
            for i, (c, t) in enumerate(zip(completions, targets, strict=True))
            if isinstance(c, str) and self.target_ok(t) and len(self.clean(c)) <= self.config.max_chars
        ]

    def batch_done(
        self, completions: list[Any], targets: list[Any], rows: list[Fields]
    ) -> list[dict[str, Any]]:
        """The values of the TRL-style rewards, one call each over the batch, as `done` per item."""
        done: list[dict[str, Any]] = [{} for _ in completions]
        batched = self.users.batched
        index = self.rewarded(completions, targets) if batched else []
        if not index:
            return done
        cleaned = [self.clean(completions[i]) for i in index]
        for user in batched:
            values, extras = self.users.trl_values(
                user, cleaned, [targets[i] for i in index], [rows[i] for i in index]
            )
            for i, value in zip(index, values, strict=True):
                done[i][user.name] = value
            place_extras(done, index, extras)
        return done

    def score(
        self, completion: Any, target: Any, fields: Fields = None, done: Mapping[str, Any] | None = None
    ) -> ScoreResult:
        """Score one completion (the reference path: no memo). `fields`: the item's data fields,
        for user rewards that take them by name (`rewards.signature`). `done`: user reward values
        (or their UserRewardError) already computed elsewhere, by name (`rewards.concurrent`)."""
        return self._score_one(completion, target, fields, False, done)

    def score_batch(
        self, completions: Iterable[Any], targets: Iterable[Any], fields: Iterable[Fields] | None = None
    ) -> list[ScoreResult]:
        """Score item i of `completions` against item i of `targets` (and of `fields` when given);
        same results as `score`."""
        completions, targets = _as_list(completions, "completions"), _as_list(targets, "targets")
        if len(completions) != len(targets):
            raise ValueError(
                f"score_batch needs one target per completion: got {len(completions)} completions "
                f"and {len(targets)} targets"
            )
        rows = [None] * len(completions) if fields is None else _as_list(fields, "fields")
        if len(rows) != len(completions):
            raise ValueError(f"score_batch got {len(rows)} field rows for {len(completions)} completions")
        done = self.batch_done(completions, targets, rows)
        return [
            self._score_one(c, t, f, True, d)
            for c, t, f, d in zip(completions, targets, rows, done, strict=True)
        ]

    def _score_one(
        self, completion: Any, target: Any, fields: Fields, in_batch: bool, done: Mapping[str, Any] | None
    ) -> ScoreResult:
        if not isinstance(completion, str) or not self.target_ok(target):
            which = "completion" if not isinstance(completion, str) else "target"
            bad = completion if which == "completion" else target
            return ScoreResult.failed(BAD_INPUT, f"{which} must be a str, got {type(bad).__name__}")
        try:
            return self._score_text(self.clean(completion), target, fields, in_batch, done or {})
        except RewardSkipped as exc:  # the reward declines to judge this item: no reward, never a 0
            return ScoreResult.failed(SKIPPED, str(exc))
        except UserRewardError as exc:
            return ScoreResult.failed(ERROR, str(exc))
        except Exception as exc:  # a scorer bug must surface as a counted error, never a crash or a 0
            return ScoreResult.failed(ERROR, f"scoring failed: {type(exc).__name__}: {exc}")

    def _score_text(
        self, c: str, target: Any, fields: Fields, in_batch: bool, done: Mapping[str, Any]
    ) -> ScoreResult:
        max_chars = self.config.max_chars
        if len(c) > max_chars:
            zeros = dict.fromkeys(self.component_names, 0.0)
            return ScoreResult(0.0, zeros, TOO_LONG, f"{len(c)} chars > max_chars={max_chars}")
        components: dict[str, float] = {}
        total, status = None, OK
        for component, weight in self.components:
            part = (component.judge_in_batch if in_batch else component.judge)(c, target, fields)
            components.update(part.components)
            term = weight * part.reward
            total = term if total is None else total + term  # summed in order, as the formula reads
            if status == OK:
                status = part.status
        total = 0.0 if total is None else total
        for user in self.users.rewards:
            value = done[user.name] if user.name in done else self.users.call(user, c, target, fields)
            if isinstance(value, UserRewardError):
                raise value
            components.update(part_components(user.name, value))
            total += user.weight * value
        extra = done.get(EXTRA_KEY)  # what TRL-style rewards logged for this item with log_extra
        return ScoreResult(total, components, status, info={LOG_EXTRA: extra} if extra else None)


class UserRewardScorer(Scorer):
    """The user rewards alone, for a task that no built-in component applies to (the `text` task).

    `ok` when every user reward gave a finite number, else `too_long`, `bad_input`, `error` or
    `skipped`. An item's target may be None (a row without one). Needs at least one user reward.
    """

    def __init__(self, config: RewardConfig | None = None):
        super().__init__((), config, data_source="text")


def _weighted(components: Sequence[tuple[RewardComponent, float]]) -> tuple[Weighted, ...]:
    pairs = list(components) if isinstance(components, list | tuple) else None
    if pairs is None or not all(
        isinstance(p, tuple)
        and len(p) == 2
        and isinstance(p[0], RewardComponent)
        and isinstance(p[1], int | float)
        for p in pairs
    ):
        raise TypeError(
            f"a scorer's components are (RewardComponent, weight) pairs, got {type(components).__name__}; "
            "the fen task's scorer is rewards.FenScorer(config)"
        )
    return tuple(Weighted(component, float(weight)) for component, weight in pairs)


def _as_list(items: Iterable[Any], name: str) -> list[Any]:
    if isinstance(items, str | bytes):
        raise TypeError(f"{name} must be a sequence of str, got a single {type(items).__name__}")
    return items if isinstance(items, list) else list(items)
