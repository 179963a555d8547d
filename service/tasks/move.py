"""The `move` task: a position (FEN) -> a good move in SAN, judged by a chess engine (Stockfish).

    task: {name: move, train_positions: 2000, engine: {nodes: 2000}}

Positions come from the FEN task's game generator (`data.seed`, `task.min_plies`..`max_plies`,
`task.natural`; held out by the same split, `data.eval_size` / `data.eval_seed`). The SFT target
is the engine's move (searched once, cached on disk; `service.tasks.move_data`). The reward
(`rewards.move.MoveScorer`) runs one engine process in each reward worker. Held-out figures:
legal rate, mean centipawn loss (a move that is not legal counting as `max_cp_loss`; also over
the legal moves alone), and best-move rate (moves losing nothing against the engine's). Without an engine binary the task refuses to start, saying how to install one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from rewards import OK, RewardConfig, Scorer
from rewards.config import EngineConfig
from rewards.engine import EngineUnavailable, find_engine
from rewards.move import MoveScorer
from service.tasks.base import RunSections, Task, check_reward_fields
from service.tasks.games import GamesConfig
from service.tasks.move_data import held_out_positions, move_pairs, training_positions
from trainer.config import DataConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.data.pairs import FieldPair, file_stream


class MoveTaskConfig(GamesConfig):
    """`name: move`: a FEN -> a good move in SAN, judged by a chess engine (Stockfish)."""

    name: Literal["move"] = Field("move", description="move: a position (FEN) -> a move, judged by an engine")
    engine: EngineConfig = Field(
        EngineConfig(), description="the chess engine judging moves (path, nodes, hash_mb, cp_scale, ...)"
    )
    train_positions: int = Field(
        2000, ge=1, description="distinct training positions (their engine moves are searched once)"
    )


@dataclass(frozen=True)
class MoveTask(Task):
    config_class = MoveTaskConfig

    data: DataConfig
    reward: RewardConfig
    engine: EngineConfig
    train_positions: int
    games: MoveTaskConfig = MoveTaskConfig()  # the plies of the generated games the positions come from
    checked_at_submit = False  # the engine is on the cluster; the submitting machine may lack it

    @classmethod
    def from_config(cls, cfg: RunSections) -> MoveTask:
        """The task; ValueError (one line) without an engine, or with a user reward the items cannot serve."""
        try:
            find_engine(cfg.task.engine.path)
        except EngineUnavailable as exc:
            raise ValueError(str(exc)) from None
        scorer = MoveScorer(cfg.reward, cfg.task.engine)
        check_reward_fields(
            scorer,
            lambda name: None if name in ("target", "fen") else "the move task's items (fen and target)",
        )
        return cls(cfg.data, cfg.reward, cfg.task.engine, cfg.task.train_positions, cfg.task)

    @property
    def alphabet(self) -> str:
        return CHESS_ALPHABET

    def eval_pairs(self) -> list[FieldPair]:
        return move_pairs(held_out_positions(self.data, self.games), self.engine, lambda _: None)

    def training_pairs(self, log: Callable[[str], None]) -> list[FieldPair]:
        fens = training_positions(self.data, self.games, self.train_positions)
        return move_pairs(fens, self.engine, log)

    def train_stream(self, file_pairs: Sequence[Any] | None) -> Callable[[int], Any]:
        if file_pairs is None:
            raise ValueError("the move task trains on the positions training_pairs gives; none were given")
        return file_stream(file_pairs, self.data.seed)

    def scorer(self) -> Scorer:
        return MoveScorer(self.reward, self.engine)

    def eval_metrics(self, scored: Sequence[Any]) -> dict[str, float]:
        return move_figures(scored, self.engine.max_cp_loss)


def move_figures(scored: Sequence[Any], forfeit_cp: float) -> dict[str, float]:
    """Held-out figures of scored moves: legal_rate; cp_loss_mean over every position, a move that
    is not legal counting as `forfeit_cp` (it would lose the game); cp_loss_legal_mean over the
    legal moves alone (NaN when none is); best_move_rate (moves losing nothing against the engine's)."""
    n = len(scored)
    if n == 0:
        return {}
    losses = [r.components["cp_loss"] for r in scored if r.status == OK and r.components.get("legal") == 1.0]
    return {
        "legal_rate": len(losses) / n,
        "cp_loss_mean": (sum(losses) + (n - len(losses)) * forfeit_cp) / n,
        "cp_loss_legal_mean": sum(losses) / len(losses) if losses else float("nan"),
        "best_move_rate": sum(loss == 0.0 for loss in losses) / n,
    }
