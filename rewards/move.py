"""The `move` task's reward: a SAN move for a position, judged by a chess engine.

Tiers follow python-chess's SAN parser: a completion it cannot read is `unparsable` (0.0) <
it reads as a move that is illegal or ambiguous here, `invalid` (0.2) < a legal move, `ok`
(0.5 + 0.5 x quality). Quality comes from the engine's centipawn loss: the score of the engine's
own move minus that of the played move (each the same fixed-node search from the position,
the second restricted to the played move), capped at `max_cp_loss`, mapped to
1 / (1 + loss / cp_scale): 1.0 for the engine's move, 0.5 at a loss of `cp_scale`.

Components: `legal` (0/1), and for a legal move `quality` and `cp_loss`. The position comes with
each item as its field `fen`; the target (the engine's move, for SFT and exact match) is not used.
The engine process belongs to the scorer's process (`setup` starts it, `close` stops it; see
`rewards.engine`), and a position's best move is searched once per scorer.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import chess

from rewards.config import EngineConfig, RewardConfig
from rewards.engine import EngineJudge, Judgement
from rewards.result import INVALID, UNPARSABLE
from rewards.scorer import Part, RewardComponent, Scorer
from rewards.user_reward import Fields

ILLEGAL_REWARD = 0.2
LEGAL_FLOOR = 0.5  # a legal move's reward before its quality: every legal move beats every illegal one
FEN_FIELD = "fen"
_BEST_CACHE = 4096  # positions whose engine move is kept (a step's K completions share one)


class MoveQuality(RewardComponent):
    """`move`: a SAN move for the position in the item's `fen` field, judged by the engine; reports
    `legal`, and for a legal move `quality` and `cp_loss`."""

    name = "move"
    reports = ("legal", "quality", "cp_loss")

    def __init__(self, engine: EngineConfig | None = None):
        self._start(engine or EngineConfig())

    def _start(self, engine: EngineConfig) -> None:
        self.engine_config = engine
        self.judge_process = EngineJudge(engine)
        self._best: OrderedDict[str, Judgement] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {"engine": self.engine_config}  # the engine process belongs to the process that scores

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._start(state["engine"])

    def setup(self) -> None:
        """Start the engine now (else it starts at the first legal move); EngineUnavailable if it cannot."""
        self.judge_process.engine()

    def close(self) -> None:
        self.judge_process.close()

    def judge(self, completion: str, target: Any, fields: Fields) -> Part:
        fen = (fields or {}).get(FEN_FIELD)
        if not isinstance(fen, str):
            raise ValueError(f"a move item carries its position as the str field {FEN_FIELD!r}; got {fen!r}")
        board = chess.Board(fen)
        try:
            move = board.parse_san(completion)
        except (chess.IllegalMoveError, chess.AmbiguousMoveError):
            return Part({"legal": 0.0}, ILLEGAL_REWARD, INVALID)
        except ValueError:  # InvalidMoveError, or anything else the parser refuses
            return Part({"legal": 0.0}, 0.0, UNPARSABLE)
        loss = self.cp_loss(board, move)
        quality = 1.0 / (1.0 + loss / self.engine_config.cp_scale)
        return Part(
            {"legal": 1.0, "quality": quality, "cp_loss": loss}, LEGAL_FLOOR + (1 - LEGAL_FLOOR) * quality
        )

    def best(self, board: chess.Board) -> Judgement:
        """The engine's move in `board` (searched once per position and process)."""
        key = board.fen()
        found = self._best.get(key)
        if found is None:
            found = self._best[key] = self.judge_process.best(board)
            if len(self._best) > _BEST_CACHE:
                self._best.popitem(last=False)
        else:
            self._best.move_to_end(key)
        return found

    def cp_loss(self, board: chess.Board, move: chess.Move) -> float:
        """Centipawns `move` gives away against the engine's move, in [0, max_cp_loss]."""
        best = self.best(board)
        if move == best.move:
            return 0.0
        loss = best.cp - self.judge_process.score_of(board, move)
        return float(min(max(loss, 0), self.engine_config.max_cp_loss))


class MoveScorer(Scorer):
    """The move task's scorer: the engine's judgement of each move, plus the user rewards."""

    def __init__(self, config: RewardConfig | None = None, engine: EngineConfig | None = None):
        self.move = MoveQuality(engine)
        super().__init__([(self.move, 1.0)], config, data_source="move")

    @property
    def engine_config(self) -> EngineConfig:
        return self.move.engine_config

    @property
    def judge(self) -> EngineJudge:
        """The engine process of this scorer in this process."""
        return self.move.judge_process

    def best(self, board: chess.Board) -> Judgement:
        return self.move.best(board)
