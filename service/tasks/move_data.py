"""The `move` task's pairs: positions from the game generator, the engine's move as the target.

    FieldPair(prompt=fen, target="Nf3", fields={"fen": fen})

Training positions are the first `task.train_positions` distinct positions of the training game
stream that have a legal move; held-out ones come from the held-out generator (never a training
position, by the generator's split). Targets are searched once by the same engine and node budget
as the reward and cached on disk by (engine, budget, positions), so a second run starts at once.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import chess

from rewards.config import EngineConfig
from rewards.engine import EngineJudge, find_engine
from rewards.move import FEN_FIELD
from service.tasks.games import GamesConfig
from trainer.config import DataConfig
from trainer.data.chess_games import eval_pairs, pair_at
from trainer.data.pairs import FieldPair

_MAX_DRAWS_PER_POSITION = 50  # stream indices tried per wanted position (duplicates, finished games)


def training_positions(data: DataConfig, games: GamesConfig, n: int) -> list[str]:
    """The first n distinct training FENs with a legal move (ValueError when the ply range holds fewer)."""
    fens: list[str] = []
    seen: set[str] = set()
    for index in range(n * _MAX_DRAWS_PER_POSITION):
        fen = pair_at(data.seed, index, games.min_plies, games.max_plies, games.natural).target
        if fen not in seen and _has_move(fen):
            seen.add(fen)
            fens.append(fen)
            if len(fens) == n:
                return fens
    raise ValueError(
        f"task.train_positions: {n} distinct positions with plies in [{games.min_plies}, {games.max_plies}] "
        f"were not found (got {len(fens)}); widen task.min_plies/max_plies or ask for fewer"
    )


def held_out_positions(data: DataConfig, games: GamesConfig) -> list[str]:
    """The held-out FENs (data.eval_size of them, less any finished game)."""
    pairs = eval_pairs(data.eval_size, data.eval_seed, games.min_plies, games.max_plies, games.natural)
    return [p.target for p in pairs if _has_move(p.target)]


def _has_move(fen: str) -> bool:
    return any(True for _ in chess.Board(fen).legal_moves)


def move_pairs(fens: Sequence[str], engine: EngineConfig, log: Callable[[str], None]) -> list[FieldPair]:
    """A pair per position, its target the engine's move in SAN (from the cache when there)."""
    targets = _cached_targets(fens, engine, log)
    return [FieldPair(fen, san, {FEN_FIELD: fen}) for fen, san in zip(fens, targets, strict=True)]


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "grpo-service" / "move-targets"


def _cache_file(fens: Sequence[str], engine: EngineConfig) -> Path:
    binary = find_engine(engine.path)
    stamp = os.stat(binary)
    key = json.dumps([binary, stamp.st_size, stamp.st_mtime_ns, engine.nodes, engine.hash_mb, list(fens)])
    return cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _cached_targets(fens: Sequence[str], engine: EngineConfig, log: Callable[[str], None]) -> list[str]:
    path = _cache_file(fens, engine)
    try:
        targets = json.loads(path.read_text())
        if isinstance(targets, list) and len(targets) == len(fens):
            return targets
    except (OSError, ValueError):  # absent or damaged: search again
        pass
    log(f"[data] searching the engine's move for {len(fens)} positions ({engine.nodes} nodes each)")
    judge = EngineJudge(engine)
    try:
        targets = []
        for fen in fens:
            board = chess.Board(fen)
            targets.append(board.san(judge.best(board).move))
    finally:
        judge.close()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(targets))
        tmp.replace(path)
    except OSError as exc:  # a read-only home still trains; it searches again next time
        log(f"[data] cannot cache the engine's moves in {path.parent}: {exc}")
    return targets
