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
from trainer.config import Frozen, tagged_union

# The keys of the `task` section before it had variants: a resolved config.yaml of that time holds
# all of them, and the ones its task never read are dropped when it is loaded again.
_FLAT_KEYS = ("path", "eval_path", "prompt_key", "target_key", "stop", "engine", "train_positions")


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


class FenTaskConfig(_TaskBase):
    """`name: fen`: a SAN move list -> the FEN of the position; its games come from the `data` section."""

    name: Literal["fen"] = Field("fen", description="fen: SAN moves from the start -> the resulting FEN")


class MoveTaskConfig(_TaskBase):
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

    @field_validator("stop")
    @classmethod
    def _non_empty_stops(cls, value: list[str]) -> list[str]:
        if any(not s for s in value):
            raise ValueError(
                f"{value!r} holds an empty string; every stop string needs at least one character"
            )
        return value


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


# The run's task, by `task.name` (fen when absent); `service.tasks.TASKS` holds a task for each name.
TaskConfig = tagged_union("name", "fen", FenTaskConfig, MoveTaskConfig, TextTaskConfig, CodeTaskConfig)
TASK_CONFIGS = {"fen": FenTaskConfig, "move": MoveTaskConfig, "text": TextTaskConfig, "code": CodeTaskConfig}
