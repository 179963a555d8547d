"""The `task` section: one variant per task (`service.tasks.TASKS`), told apart by `task.name`.

Each variant holds the keys its task reads, so a key set for another task is refused as that
task's key (one line naming it and the task that reads it), and the reference lists each task's
keys. Checks that need other sections too (`data`, `reward`) are the task's own
(`service.tasks.Task.check_config`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rewards.config import EngineConfig
from trainer.config_base import Frozen, tagged_union

# The keys of the `task` section before it had variants: a resolved config.yaml of that time holds
# all of them, and the ones its task never read are dropped when it is loaded again.
_FLAT_KEYS = ("path", "eval_path", "prompt_key", "target_key", "stop", "engine", "train_positions")


def _check_stops(value: list[str] | None) -> list[str] | None:
    if value is not None and any(not s for s in value):
        raise ValueError(f"{value!r} holds an empty string; every stop string needs at least one character")
    return value


class _TaskBase(Frozen):
    """Keys every task reads: how prompts reach an hf policy."""

    name: str = Field(description="the task: its data, its scorer and its held-out figures")
    chat_template: bool = Field(
        False,
        description="model.source=hf: render each prompt as a user message through the tokenizer's chat "
        "template (instruct models)",
    )
    system: str | None = Field(None, description="with chat_template: a system message before each prompt")

    @model_validator(mode="before")
    @classmethod
    def _older_flat_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and all(k in data for k in _FLAT_KEYS):
            return {k: v for k, v in data.items() if k in cls.model_fields or k not in _FLAT_KEYS}
        return data


class _ChessTask(_TaskBase):
    """Keys of the tasks whose positions come from generated games (`trainer.data.chess_games`)."""

    min_plies: int = Field(1, ge=0, description="fewest half-moves in a generated game's prompt")
    max_plies: int = Field(4, ge=0, description="most half-moves in a generated game's prompt")
    natural: bool = Field(False, description="weight moves toward more natural play")

    @model_validator(mode="after")
    def _check_plies(self) -> _ChessTask:
        if self.min_plies > self.max_plies:
            raise ValueError(f"min_plies ({self.min_plies}) must be <= max_plies ({self.max_plies})")
        return self


FILE_SOURCES = {"pgn": "pgn", "jsonl": "jsonl", "json": "jsonl"}  # task.source by the file's extension


class FenTaskConfig(_ChessTask):
    """`name: fen`: a SAN move list -> the FEN of the position, from generated games or a file."""

    name: Literal["fen"] = Field("fen", description="fen: SAN moves from the start -> the resulting FEN")
    source: Literal["generated", "pgn", "jsonl"] = Field(
        "generated",
        description="generated: random games (seeded by data.seed); pgn / jsonl: the games or (prompt, target) "
        "rows of task.path",
    )
    path: str | None = Field(None, description="file for source=pgn or jsonl")

    @model_validator(mode="before")
    @classmethod
    def _source_from_extension(cls, data: Any) -> Any:
        # A path given without a source is read as its extension says, never silently ignored.
        if isinstance(data, dict) and data.get("path") and "source" not in data:
            suffix = str(data["path"]).lower().rsplit(".", 1)[-1]
            if suffix in FILE_SOURCES:
                return {**data, "source": FILE_SOURCES[suffix]}
            raise ValueError(
                f"path {data['path']!r}: set task.source (pgn or jsonl); "
                f"it cannot be told from the extension (.pgn, .jsonl, .json)"
            )
        return data

    @model_validator(mode="after")
    def _check_source(self) -> FenTaskConfig:
        if self.source == "generated" and self.path:
            raise ValueError(
                f"path {self.path!r} is read only with source pgn or jsonl; source is 'generated'"
            )
        if self.source != "generated" and not self.path:
            raise ValueError(f"source={self.source!r} needs task.path")
        return self


class MoveTaskConfig(_ChessTask):
    """`name: move`: a FEN -> a good move in SAN, judged by a chess engine (Stockfish)."""

    name: Literal["move"] = Field("move", description="move: a position (FEN) -> a move, judged by an engine")
    engine: EngineConfig = Field(
        EngineConfig(), description="the chess engine judging moves (path, nodes, hash_mb, cp_scale, ...)"
    )
    train_positions: int = Field(
        2000, ge=1, description="distinct training positions (their engine moves are searched once)"
    )


class TextTaskConfig(_TaskBase):
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

    _non_empty_stops = field_validator("stop")(lambda value: _check_stops(value))


class CodeTaskConfig(TextTaskConfig):
    """`name: code`: a prompt -> a program, run against the row's tests in the sandbox."""

    name: Literal["code"] = Field("code", description="code: a program, run against tests in the sandbox")
    path: str | None = Field(
        None,
        description="JSONL file of problems (prompt, optional target, and test_list, test with entry_point, "
        "or tests); unset: the bundled integer-function problems",
    )
    target_key: str = Field(
        "target",
        min_length=1,
        description="the row key holding the SFT answer, a program (optional in a row)",
    )
    all_or_nothing: bool = Field(
        False, description="reward 1 only when every test passes (else 0); false: the share of tests passed"
    )
    train_problems: int = Field(
        2000, ge=1, description="bundled problems (no path): distinct training problems generated (data.seed)"
    )
    time_limit_s: float = Field(
        5.0, gt=0.0, description="wall-clock and CPU seconds of one sandboxed run (past it: status timeout)"
    )
    memory_mb: int = Field(512, ge=16, description="memory of one sandboxed run (past it: status memory)")
    process_limit: Literal["auto", "cgroup_v1", "cgroup_v2", "uid"] = Field(
        "auto",
        description="how a sandboxed run's processes are capped: cgroup_v2 (a delegated v2 subtree), cgroup_v1 "
        "(the v1 pids controller), uid (RLIMIT_NPROC on a uid of the sandbox's own: no writable cgroup needed); "
        "auto: the first of these that works on the reward worker's host",
    )


class EnvTaskConfig(_TaskBase):
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

    _non_empty_stops = field_validator("stop")(lambda value: _check_stops(value))


# The run's task, by `task.name` (fen when absent); `service.tasks.TASKS` holds a task for each name.
TaskConfig = tagged_union(
    "name", "fen", FenTaskConfig, MoveTaskConfig, TextTaskConfig, CodeTaskConfig, EnvTaskConfig
)
TASK_CONFIGS = {
    "fen": FenTaskConfig,
    "move": MoveTaskConfig,
    "text": TextTaskConfig,
    "code": CodeTaskConfig,
    "env": EnvTaskConfig,
}


# `data.<key>` before these keys moved to the tasks that read them (the fen task all five, the move
# task the plies and `natural`); a config file or a run's config.yaml of that time still loads.
MOVED_FROM_DATA = {"source": "generated", "path": None, "min_plies": 1, "max_plies": 4, "natural": False}


def moved_from_data(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with the chess keys of its `data` section moved into its `task` section (written in
    the old place, a key wins over the same key in `task`); a key the task does not read is dropped
    at its old default and refused otherwise, in one line naming it."""
    data = config.get("data")
    if not isinstance(data, dict) or not MOVED_FROM_DATA.keys() & data.keys():
        return config
    task = config.get("task") or {}
    task = task.model_dump() if hasattr(task, "model_dump") else dict(task)
    name = task.get("name", "fen")
    for key in MOVED_FROM_DATA.keys() & data.keys():
        readers = ("fen",) if key in ("source", "path") else ("fen", "move")
        if name in readers and (key not in task or data[key] != MOVED_FROM_DATA[key]):
            task[key] = data[key]
        elif name not in readers and data[key] != MOVED_FROM_DATA[key]:
            tasks = " and ".join(readers)
            raise ValueError(
                f"data.{key} is now task.{key}, read by the {tasks} tasks only; task.name is {name!r}"
            )
    rest = {k: v for k, v in data.items() if k not in MOVED_FROM_DATA}
    return {**config, "data": rest, "task": task}
