"""The generic `text` task: prompts (and optional targets) from JSONL (or Parquet, or a dataset saved
with `save_to_disk`: `service.tasks.text_files`), scored by the user rewards alone.

    task: {name: text, path: train.jsonl, eval_path: held_out.jsonl, prompt_key: prompt,
           target_key: target, stop: ["\n\n"]}
    reward: {user: [{fn: "my_rewards:check"}]}

- Held-out rows come from `eval_path`, or, without one, `data.eval_size` distinct prompts split off
  `path` by a shuffle seeded with `data.eval_seed`; a training row never holds a held-out prompt.
- The training stream is an endless seeded reshuffle of the training rows (`data.seed`); SFT needs a
  target in every training row, GRPO does not.
- A user reward may take `prompt` and any field of its row by name (`rewards.signature`); each
  item carries just the fields its rewards take. A reward that needs a field some row lacks is
  refused before the run, naming the first such row.
- For the built-in policy the character tokenizer is built from the data: every character of the
  prompts, targets and stop strings.

The task loads its files once, in the driver (`from_config`); what travels to the Ray Train
workers is the small rest: the alphabet, the stop strings, the stream's seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from pydantic import Field, field_validator

from rewards import Scorer, UserRewardScorer
from service.preflight.data import FitLimits, check_records
from service.tasks.base import RunSections, Task, TaskConfigBase, check_reward_fields, check_stops
from service.tasks.text_files import load_rows
from trainer.data.pairs import DataFileError, FieldPair, file_stream
from trainer.data.text_rows import TextRow, split_held_out, without_prompts


class TextTaskConfig(TaskConfigBase):
    """`name: text`: prompts (and optional targets) from JSONL rows, scored by the user rewards alone."""

    name: Literal["text"] = Field("text", description="text: JSONL rows scored by reward.user")
    path: str | None = Field(
        None,
        description="training rows (required): a JSONL file, a .parquet file (verl's) or a save_to_disk directory",
    )
    eval_path: str | None = Field(
        None,
        description="held-out rows, in any form path takes (default: data.eval_size prompts split off path)",
    )
    prompt_key: str = Field("prompt", min_length=1, description="the row key holding the prompt")
    target_key: str = Field(
        "target", min_length=1, description="the row key holding the target (optional in a row)"
    )
    stop: list[str] = Field(default_factory=list, description="strings that end a completion (besides EOS)")

    _non_empty_stops = field_validator("stop")(lambda value: check_stops(value))

    def data_files(self) -> tuple[str, ...]:
        return tuple(p for p in (self.path, self.eval_path) if p)


class TextData(NamedTuple):
    """What the driver loaded: both sets of pairs, the scorer, and the lines to log."""

    train: list[FieldPair]
    held_out: list[FieldPair]
    scorer: Scorer
    notes: list[str]


@dataclass(frozen=True)
class TextTask(Task):
    config_class = TextTaskConfig

    seed: int
    chars: str  # the built-in tokenizer's alphabet: every character of the data and stop strings
    stops: tuple[str, ...]
    data: TextData | None = field(default=None, compare=False, repr=False)  # driver only

    @classmethod
    def check_config(cls, cfg: RunSections) -> str | None:
        if not cfg.task.path:
            return "task.path: the text task needs a JSONL file of rows (one object per line with a prompt)"
        if cfg.task.target_key == cfg.task.prompt_key:
            return f"task.target_key: {cfg.task.target_key!r} is task.prompt_key too; the target needs its own key"
        if not cfg.reward.user:
            return "reward.user: the text task is scored by user rewards alone; list at least one"
        return None

    @classmethod
    def from_config(cls, cfg: RunSections) -> TextTask:
        """Load and check the rows; ValueError (one line naming the key or file:line) when unusable."""
        t = cfg.task
        scorer = UserRewardScorer(cfg.reward)
        rows = _load(t.path, "task.path", t.prompt_key, t.target_key)
        if t.eval_path:
            held = _load(t.eval_path, "task.eval_path", t.prompt_key, t.target_key)
            train = without_prompts(rows, {r.prompt for r in held})
            if not train:
                raise ValueError(
                    f"task.path: every prompt of {t.path} is also in task.eval_path {t.eval_path}"
                )
            where = f"{t.eval_path}: {len(held)} held-out rows"
        else:
            try:
                train, held = split_held_out(rows, cfg.data.eval_size, cfg.data.eval_seed)
            except ValueError as exc:
                raise ValueError(
                    f"data.eval_size: {cfg.data.eval_size} is too large for {t.path}: {exc}"
                ) from None
            where = f"{len(held)} held-out rows split off it (data.eval_size, data.eval_seed)"
        left_out = len(rows) - len(train)  # held out, or sharing a held-out prompt
        notes = [
            f"[data] {t.path}: {len(train)} training rows ({left_out} left out as held-out prompts); {where}"
        ]
        _check_sft_targets(cfg, train)
        limits = FitLimits.of(cfg)  # the alphabet is the data's own: every row encodes; it must fit
        check_records("task.path", ((r.where, r.prompt, r.target) for r in train), limits, None, train=True)
        held_key = "task.eval_path" if t.eval_path else "task.path"
        check_records(held_key, ((r.where, r.prompt, r.target) for r in held), limits, None, train=False)
        take = _fields_taken(scorer, [*train, *held])
        data = TextData([_pair(r, take) for r in train], [_pair(r, take) for r in held], scorer, notes)
        chars = {c for r in (*train, *held) for c in r.prompt + (r.target or "")}
        chars.update(c for s in t.stop for c in s)
        return cls(seed=cfg.data.seed, chars="".join(sorted(chars)), stops=tuple(t.stop), data=data)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "data": None}  # the workers get their pairs from the object store

    @property
    def alphabet(self) -> str:
        return self.chars

    @property
    def stop(self) -> tuple[str, ...]:
        return self.stops

    def _loaded(self) -> TextData:
        if self.data is None:
            raise RuntimeError("the text task's data is loaded by from_config in the driver")
        return self.data

    def eval_pairs(self) -> list[FieldPair]:
        return self._loaded().held_out

    def training_pairs(self, log: Callable[[str], None]) -> list[FieldPair]:
        data = self._loaded()
        for note in data.notes:
            log(note)
        return data.train

    def train_stream(self, file_pairs: Sequence[Any] | None) -> Callable[[int], Any]:
        if file_pairs is None:
            raise ValueError("the text task trains on the rows of task.path; none were given")
        return file_stream(file_pairs, self.seed)

    def scorer(self) -> Scorer:
        return self._loaded().scorer


def _load(path: str | None, key: str, prompt_key: str, target_key: str) -> list[TextRow]:
    try:
        return load_rows(str(path), prompt_key, target_key)
    except DataFileError as exc:
        raise ValueError(f"{key}: {exc}") from None


def _check_sft_targets(cfg: RunSections, train: Sequence[TextRow]) -> None:
    if cfg.sft.steps == 0:
        return
    missing = [r for r in train if r.target is None]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(
            f"sft.steps: {cfg.sft.steps} needs a target in every training row; {missing[0].where} has no "
            f"{cfg.task.target_key!r}{more}; set sft.steps=0 or add targets"
        )


class _Taken(NamedTuple):
    names: frozenset[str]
    every_field: bool


def _fields_taken(scorer: Scorer, rows: Sequence[TextRow]) -> _Taken:
    """Which fields the rewards take; refuses one that needs a field (or the target) a row lacks."""

    def lacking(name: str) -> str | None:
        for r in rows:
            if (r.target is None) if name == "target" else (name not in r.fields):
                return r.where
        return None

    check_reward_fields(scorer, lacking)
    params = scorer.user_params.values()
    return _Taken(frozenset(f for p in params for f in p.fields), any(p.any_field for p in params))


def _pair(row: TextRow, take: _Taken) -> FieldPair:
    """The row as the trainer sees it, carrying only the fields its rewards take."""
    fields = (
        dict(row.fields) if take.every_field else {k: row.fields[k] for k in take.names if k in row.fields}
    )
    return FieldPair(row.prompt, row.target, fields)
