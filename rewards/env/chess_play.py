"""`chess-play`: play a few moves against Stockfish from a position.

    first observation   "<FEN>\\nmove:\\n"
    action              "Nf3"                      (SAN; a turn ends at a newline)
    observation         "e5\\n"                     (the engine's reply)

Each legal move earns its quality as the `move` task measures it, 1 / (1 + loss / cp_scale) with
the loss in centipawns against the engine's own move (1.0 for the engine's move), divided by the
row's number of moves, so an episode's reward is its mean move quality in [0, 1]. An illegal or
unreadable move ends the episode (its earlier moves keep their reward); so does the end of the
game or of the row's `moves`. The engine searches a fixed node budget with its hash cleared
before every search (`rewards.engine`), so episodes repeat exactly and can be replayed; one engine
runs per process. Rows: `{"fen": ..., "moves": 3}` from task.path, or positions reached by a few
random moves from the start.
"""

from __future__ import annotations

import random
import string
from collections.abc import Mapping
from typing import Any

import chess

from rewards.config import EngineConfig
from rewards.engine import EngineJudge
from rewards.env.base import Environment, StepResult

ENGINE = EngineConfig()
_JUDGES: dict[EngineConfig, EngineJudge] = {}  # one engine per process and config


def judge(cfg: EngineConfig = ENGINE) -> EngineJudge:
    if cfg not in _JUDGES:
        _JUDGES[cfg] = EngineJudge(cfg)
    return _JUDGES[cfg]


class ChessPlay(Environment):
    deterministic = True
    alphabet = string.ascii_letters + string.digits + "/ -+#=:\n"
    moves = 3  # the policy's moves in an episode (a row's "moves" overrides it)
    engine = ENGINE

    def setup(self) -> None:
        judge(self.engine).engine()  # start (or reuse) this process's engine now: a missing one fails here

    def reset(self, row: Mapping[str, Any]) -> str:
        self.board = chess.Board(str(row["fen"]))
        if self.board.is_game_over():
            raise ValueError(f"the game of {row['fen']!r} is over: nothing to play")
        self.left = self.total = int(row.get("moves", self.moves))
        return f"{self.board.fen()}\nmove:\n"

    def step(self, action: str) -> StepResult:
        try:
            move = self.board.parse_san(action.strip())
        except ValueError:  # illegal or unreadable: the episode ends here
            return StepResult("", 0.0, True, {"illegal": action.strip()[:20]})
        engine = judge(self.engine)
        best = engine.best(self.board)
        loss = max(0, best.cp - engine.score_of(self.board, move)) if move != best.move else 0
        quality = 1.0 / (1.0 + min(loss, self.engine.max_cp_loss) / self.engine.cp_scale)
        info = {"move": move.uci(), "best": best.move.uci(), "cp_loss": loss}
        self.board.push(move)
        self.left -= 1
        if self.left == 0 or self.board.is_game_over():
            return StepResult("", quality / self.total, True, info)
        reply = engine.best(self.board).move
        san = self.board.san(reply)
        self.board.push(reply)
        return StepResult(
            f"{san}\n", quality / self.total, self.board.is_game_over(), {**info, "reply": reply.uci()}
        )

    @classmethod
    def generate_row(cls, index: int, seed: int) -> dict[str, Any]:
        rng = random.Random(f"chess-play:{seed}:{index}")
        board = chess.Board()
        for _ in range(rng.randint(2, 10)):
            legal = list(board.legal_moves)
            board.push(rng.choice(legal))
            if board.is_game_over():
                board.pop()
                break
        return {"fen": board.fen(), "moves": cls.moves}

    @classmethod
    def demonstration(cls, row: Mapping[str, Any], rng: random.Random) -> list[str]:
        """The engine's own moves (each answered by the engine, as in an episode)."""
        board, engine = chess.Board(str(row["fen"])), judge(cls.engine)
        actions: list[str] = []
        for _ in range(int(row.get("moves", cls.moves))):
            if board.is_game_over():
                break
            move = engine.best(board).move
            actions.append(board.san(move))
            board.push(move)
            if board.is_game_over():
                break
            board.push(engine.best(board).move)
        return actions
