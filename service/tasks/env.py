"""The `env` task: multi-turn episodes with an environment that answers each turn (`rewards.env`).

    task: {name: env, env: "my_envs:GuessNumber", max_turns: 6}     # a turn ends at the env's stop
    sampling: {max_new_tokens: 96}    # the whole episode's tokens: the policy's and the answers'

- A row (a JSONL object of `task.path`, or the environment's own `generate_row`) is handed to
  `reset`; the first observation is the prompt. Held-out rows come from `task.eval_path`, or are
  `data.eval_size` rows generated from their own indices (`data.eval_seed`).
- The SFT warm start plays the environment's `demonstration` of each row and trains on its
  actions, the answers left out of the loss; a run with SFT steps needs one.
- Every environment call (the demonstrations played before a run, the checks, the episodes of
  each step and evaluation) runs in a child process of the process that asks for it
  (`rewards.env.process`), with `task.step_timeout_s` as its deadline: a reset or step past it
  ends its episode `timeout` and its child is killed, so nothing is left blocked; a demonstration
  or check that passes it refuses the run in one line.
- Episodes run on the reward pool's workers (`task.hosting: pool`: each keeps a
  `rewards.env.remote.EpisodeServer`, played by `actors.pool.episodes`), the
  steps of one pool call sharing `pool.chunk_timeout_s`; an episode whose worker died is replayed
  on another one from its recorded actions (environments that declare themselves deterministic).
  With `hosting: local` they run in each trainer process (`rewards.env.host.LocalEpisodes`) and no
  pool is started. The episode's result is the sample's reward; once a batch's failed episodes
  (env_error, timeout) are more than `pool.error_rate_threshold` of it, the rest are `abandoned`
  (`trainer.sampling.episodes`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator

from rewards.env import Episode, LocalEpisodes, load_environment
from rewards.env.base import Environment
from rewards.env.check import EnvTrial, env_problem, try_environment
from rewards.env.remote import EpisodeServer
from service.preflight.data import FitLimits, check_records
from service.tasks.base import RunSections, Task, TaskConfigBase, check_stops
from service.tasks.text_files import table_records
from trainer.data.pairs import DataFileError, EpisodePair, file_stream

ENV_TRIAL_ROWS = 4  # rows the environment is tried on before a run
EVAL_ROWS_BASE = 1 << 40  # generated held-out rows take indices the training stream never reaches
# Of pool.chunk_timeout_s, what the steps of one pool call may take: the rest is the call's way
# there and back, so the worker answers before the pool would kill it.
CALL_BUDGET_SHARE = 0.8


class EnvTaskConfig(TaskConfigBase):
    """`name: env`: multi-turn episodes with an environment that answers each turn."""

    name: Literal["env"] = Field("env", description="env: episodes with an environment (rewards.env)")
    env: str = Field(
        "guess",
        min_length=1,
        description="the environment: a bundled name (guess) or 'module:Class' (a rewards.env.Environment)",
    )
    max_turns: int = Field(
        8, ge=1, description="most actions in an episode; one still going after them ends as max_turns"
    )
    episode_reward: Literal["sum", "final"] = Field(
        "sum", description="an episode's reward: the sum of its turns' rewards, or the last turn's"
    )
    step_timeout_s: float = Field(
        10.0,
        gt=0.0,
        description="seconds one reset or step may take; a later one ends the episode as timeout",
    )
    hosting: Literal["pool", "local"] = Field(
        "pool",
        description="where episodes run: pool (on the reward workers: calls past pool.chunk_timeout_s kill and "
        "replace the worker, a lost episode is replayed) or local (in each trainer process)",
    )
    path: str | None = Field(
        None,
        description="JSONL file of rows (one object per line) handed to reset; unset: the environment's own",
    )
    eval_path: str | None = Field(
        None, description="held-out rows (JSONL); unset: data.eval_size rows generated apart (data.eval_seed)"
    )
    stop: list[str] | None = Field(
        None,
        min_length=1,
        description="strings that end a turn: the text before one is the action handed to step "
        "(unset: the environment's own, Environment.stop: a newline unless it says otherwise)",
    )

    _non_empty_stops = field_validator("stop")(lambda value: check_stops(value))

    def data_files(self) -> tuple[str, ...]:
        return tuple(p for p in (self.path, self.eval_path) if p)


@functools.cache
def environment_class(spec: str) -> type[Environment]:
    """The class `task.env` names, resolved once per process (EnvSpecError, a ValueError, when it
    cannot be). The task travels to other processes by the name, as a wrapped SkyRL class cannot be
    pickled; each resolves it at its first use."""
    return load_environment(spec)


@dataclass(frozen=True)
class EnvTask(Task):
    config_class = EnvTaskConfig
    episodic = True

    env: str
    max_turns: int
    reward_mode: str
    step_timeout_s: float
    hosting: str
    stops: tuple[str, ...]
    seed: int
    chars: str
    # what the steps of one pool call may take of pool.chunk_timeout_s (the episodes on the pool)
    call_budget_s: float | None = None
    # pool.error_rate_threshold: past it, the rest of a batch's episodes are abandoned
    failure_share: float | None = None
    held_out: list[EpisodePair] = field(default_factory=list, compare=False, repr=False)
    train_rows: list[EpisodePair] | None = field(default=None, compare=False, repr=False)  # driver only
    # The first training rows with their demonstrations (checked for fit, tried before a run); driver only
    train_sample: list[EpisodePair] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def from_config(cls, cfg: RunSections) -> EnvTask:
        """Load the environment and its rows; ValueError (one line naming the key) when unusable."""
        t = cfg.task
        env_cls = environment_class(t.env)
        task = cls(
            env=t.env,
            max_turns=t.max_turns,
            reward_mode=t.episode_reward,
            step_timeout_s=t.step_timeout_s,
            hosting=t.hosting,
            stops=tuple(t.stop if t.stop is not None else env_cls.stop),
            seed=cfg.data.seed,
            chars=env_cls.alphabet,
            call_budget_s=cfg.pool.chunk_timeout_s * CALL_BUDGET_SHARE,
            failure_share=cfg.pool.error_rate_threshold,
        )
        rows = _read_rows(t.path, "task.path") if t.path else None
        if t.eval_path:
            held_rows = _read_rows(t.eval_path, "task.eval_path")
        elif rows is not None:
            if cfg.data.eval_size >= len(rows):
                raise ValueError(f"data.eval_size: {cfg.data.eval_size} leaves no training rows of {t.path}")
            held_rows, rows = rows[: cfg.data.eval_size], rows[cfg.data.eval_size :]
        else:
            held_rows = [
                _generated(env_cls, EVAL_ROWS_BASE + i, cfg.data.eval_seed) for i in range(cfg.data.eval_size)
            ]
        # held-out rows carry no demonstration: evaluation plays them
        held = [task.prompt_pair(row) for row in held_rows]
        train = None if rows is None else [task.pair(row, i) for i, row in enumerate(rows)]
        sample = (
            train[:64]
            if train is not None
            else [task.pair(_generated(env_cls, i, task.seed), i) for i in range(64)]
        )
        if cfg.sft.steps > 0 and any(p.turns is None for p in sample):
            raise ValueError(
                f"sft.steps: {cfg.sft.steps}, but task.env {t.env!r} gives no demonstration of its rows "
                "to warm start from; set sft.steps: 0"
            )
        limits = FitLimits.of(cfg)
        chars = set(env_cls.alphabet) | {c for s in task.stops for c in s}
        for p in (*held, *sample):
            chars.update(p.prompt + (p.target or ""))
        task = dataclasses.replace(
            task, chars="".join(sorted(chars)), held_out=held, train_rows=train, train_sample=sample
        )
        check_records(
            "task", ((f"row {i}", p.prompt, p.target) for i, p in enumerate(sample)), limits, None, train=True
        )
        check_records(
            "task",
            ((f"held-out row {i}", p.prompt, None) for i, p in enumerate(held)),
            limits,
            None,
            train=False,
        )
        return task

    def __getstate__(self) -> dict[str, Any]:
        # the workers get file rows from the object store, and try nothing
        return {**self.__dict__, "train_rows": None, "train_sample": []}

    @property
    def environment(self) -> type[Environment]:
        """The environment's class (`environment_class`: resolved once per process)."""
        return environment_class(self.env)

    def _started(self, row: Mapping[str, Any]) -> tuple[Episode, str]:
        episode = Episode(self.environment, row, max_turns=self.max_turns, step_timeout_s=self.step_timeout_s)
        prompt = episode.start()
        if prompt is None:
            raise ValueError(f"task.env {self.env!r}: row {dict(row)!r:.80} cannot start: {episode.reason}")
        return episode, prompt

    def prompt_pair(self, row: Mapping[str, Any]) -> EpisodePair:
        """The row's first observation, without a demonstration (what a GRPO step reads)."""
        episode, prompt = self._started(row)
        episode.end("ok")
        return EpisodePair(prompt, None, dict(row))

    def pair(self, row: Mapping[str, Any], index: int) -> EpisodePair:
        """The row's first observation and its demonstration, played through the environment."""
        episode, prompt = self._started(row)
        actions = self.environment.demonstration(row, random.Random(f"demo:{self.seed}:{index}"))
        if actions is None:
            episode.end("ok")
            return EpisodePair(prompt, None, dict(row))
        from trainer.sampling.stop import first_stop  # torch: not imported to validate a config

        turns = []
        for written in actions:  # each as the policy writes it: its stop string appended if it has none
            if first_stop(written, self.stops) is None:
                written += self.stops[0]
            observation, over = episode.act(_action(written, self.stops))
            turns.append((written, observation))
            if over:
                break
        result = episode.end("ok")
        if not result.usable:
            raise ValueError(
                f"task.env {self.env!r}: the demonstration of row {dict(row)!r:.80} ended {result.status}: {result.reason}"
            )
        return EpisodePair(prompt, "".join(a + o for a, o in turns), dict(row), tuple(turns))

    @property
    def deterministic(self) -> bool:
        return bool(self.environment.deterministic)

    @property
    def alphabet(self) -> str:
        return self.chars

    @property
    def stop(self) -> tuple[str, ...]:
        return self.stops

    def episode_host(self, pool_of: Callable[[], Any] | None = None) -> Any:
        """Where this rank's episodes run: on the reward pool (task.hosting=pool), else here."""
        if self.hosting == "pool":
            from actors.pool.episodes import PoolEpisodes  # Ray: not imported to validate a config

            if pool_of is None:
                raise ValueError("task.hosting=pool: the episodes need the run's reward pool")
            return PoolEpisodes(
                pool_of,
                max_turns=self.max_turns,
                reward_mode=self.reward_mode,
                aggregate_metrics=self.environment.aggregate_metrics,
                failure_share=self.failure_share,
            )
        return LocalEpisodes(
            self.environment,
            max_turns=self.max_turns,
            reward_mode=self.reward_mode,
            step_timeout_s=self.step_timeout_s,
            failure_share=self.failure_share,
        )

    def environment_trial(self, n: int = ENV_TRIAL_ROWS) -> EnvTrial:
        """The environment tried on the first n training rows (the file's, or the generated
        stream's), each played twice with its demonstration (or one empty action where it has
        none): time per call, failures, determinism. Held-out rows carry no demonstration."""
        pairs = (self.train_rows if self.train_rows is not None else self.train_sample)[:n]
        if len(pairs) < n and self.train_rows is None:  # a generated stream goes on past the sample
            stream = self.train_stream(None)
            pairs += [stream(i) for i in range(len(pairs), n)]
        plays = [(p.fields, _actions(p, self.stops)) for p in pairs]
        return try_environment(self.environment, plays, self.max_turns, self.step_timeout_s)

    def environment_problem(self) -> str | None:
        """One line saying why a run should not start with this environment; None when it may."""
        return env_problem(self.environment_trial())

    def eval_pairs(self) -> list[EpisodePair]:
        return self.held_out

    def training_pairs(self, log: Callable[[str], None]) -> list[EpisodePair] | None:
        if self.train_rows is not None:
            log(f"[data] task.path: {len(self.train_rows)} training rows, {len(self.held_out)} held out")
        return self.train_rows

    def train_stream(self, file_pairs: Sequence[Any] | None) -> Callable[[int], Any]:
        if file_pairs is not None:
            return file_stream(file_pairs, self.seed)
        env_cls = self.environment
        return lambda i: self.pair(_generated(env_cls, i, self.seed), i)

    def grpo_stream(self, file_pairs: Sequence[Any] | None) -> Callable[[int], Any]:
        """The training stream's rows without their demonstrations (GRPO reads the prompt and the
        row; a demonstration can cost an engine's search per move)."""
        if file_pairs is not None:
            return file_stream(file_pairs, self.seed)
        env_cls = self.environment
        return lambda i: self.prompt_pair(_generated(env_cls, i, self.seed))

    def generated_head(self, n: int) -> list[EpisodePair]:
        """The sample's rows with their demonstrations (they stand for the rest, as in `from_config`),
        then the GRPO stream's: the same rows without one (a demonstration can cost an engine's search
        per move, and the checks read only the prompts and rows)."""
        head = list(self.train_sample[:n])
        stream = self.grpo_stream(None)
        return head + [stream(i) for i in range(len(head), n)]

    def scorer(self) -> None:
        """None: an episode's reward is its environment's, nothing is scored."""
        return None

    def episode_server(self) -> EpisodeServer | None:
        """What the pool's workers keep: the episodes they play (task.hosting=pool); None when the
        episodes run in the trainer processes (no pool is started then)."""
        if self.hosting != "pool":
            return None
        return EpisodeServer(
            self.env,
            max_turns=self.max_turns,
            reward_mode=self.reward_mode,
            step_timeout_s=self.step_timeout_s,
            call_budget_s=self.call_budget_s,
        )


def _action(written: str, stops: Sequence[str]) -> str:
    """What the environment is handed of a turn: the text before its first stop string."""
    from trainer.sampling.stop import first_stop

    at = first_stop(written, stops)
    return written if at is None else written[:at]


def _actions(pair: EpisodePair, stops: Sequence[str]) -> list[str]:
    """The actions of a pair's demonstration (one empty action where it has none)."""
    return [_action(written, stops) for written, _ in pair.turns] if pair.turns else [""]


def _generated(env_cls: type[Environment], index: int, seed: int) -> dict[str, Any]:
    try:
        return dict(env_cls.generate_row(index, seed))
    except NotImplementedError as exc:
        raise ValueError(f"task.path: {exc}") from None


def _read_rows(path: str, key: str) -> list[dict[str, Any]]:
    """The rows of a JSONL file, a .parquet file or a dataset directory (SkyRL's and verl's data
    files); ValueError naming the first bad line."""
    try:
        records = table_records(path)
    except DataFileError as exc:
        raise ValueError(f"{key}: {exc}") from None
    if records is not None:
        if not records:
            raise ValueError(f"{key}: {path} holds no rows")
        return records
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{key}: {path}:{number}: not JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{key}: {path}:{number}: a row must be a JSON object")
                rows.append(row)
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path} ({exc.strerror})") from None
    if not rows:
        raise ValueError(f"{key}: {path} holds no rows")
    return rows
