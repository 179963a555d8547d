"""The FEN task: a SAN move list from the standard start -> the FEN of the resulting position.

Training pairs are generated games (or a PGN / JSONL file); the held-out set is generated from
positions training never sees; the reward is FEN validity + Levenshtein similarity + exact match
(`rewards.score`), plus any user rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rewards import RewardConfig, Scorer, build_scorer
from service.preflight.data import FitLimits, check_generated_games, check_records
from service.tasks.base import Task, check_reward_fields
from trainer.config import DataConfig
from trainer.data.chess_games import CHESS_ALPHABET, GameStream, eval_pairs, is_held_out, load_pgn
from trainer.data.pairs import DataFileError, Pair, file_stream, load_jsonl

if TYPE_CHECKING:
    from service.config import ServiceConfig


@dataclass(frozen=True)
class FenTask(Task):
    name = "fen"
    data: DataConfig
    reward: RewardConfig
    limits: FitLimits | None = None  # what every record must fit (checked in the driver)

    @classmethod
    def from_config(cls, cfg: ServiceConfig) -> FenTask:
        """The task; refuses a user reward that does not resolve or takes more than completion and
        target, and generated games whose longest prompt cannot fit."""
        check_reward_fields(
            build_scorer(cfg.reward),
            lambda name: None if name == "target" else "the fen task's items (completion and target only)",
        )
        limits = FitLimits.of(cfg)
        check_generated_games(cfg.data.max_plies, limits)
        return cls(data=cfg.data, reward=cfg.reward, limits=limits)

    @property
    def alphabet(self) -> str:
        return CHESS_ALPHABET

    def eval_pairs(self) -> list[Pair]:
        d = self.data
        pairs = eval_pairs(d.eval_size, d.eval_seed, d.min_plies, d.max_plies, d.natural)
        if self.limits is not None:  # generated like the training games: their SFT fit too
            located = ((f"held-out position {i}", p.prompt, p.target) for i, p in enumerate(pairs))
            check_records("model.block_size", located, self.limits, CHESS_ALPHABET, train=d.source == "generated")
        return pairs

    def training_pairs(self, log: Callable[[str], None]) -> list[Pair] | None:
        d = self.data
        if d.source == "generated":
            return None
        try:
            report = load_pgn(d.path, d.min_plies, d.max_plies) if d.source == "pgn" else load_jsonl(d.path)
        except DataFileError as exc:  # the file cannot be read at all
            raise ValueError(f"data.path: {exc}") from None
        kept = [(w, p) for w, p in zip(report.where, report.pairs, strict=True) if not is_held_out(p.target)]
        if self.limits is not None:
            located = ((w, p.prompt, p.target) for w, p in kept)
            check_records("data.path", located, self.limits, CHESS_ALPHABET, train=True)
        pairs = [p for _, p in kept]
        if report.skipped:
            log(f"[data] {d.path}: skipped {report.skipped} bad records; first: {report.errors[0]}")
        if not pairs:
            raise ValueError(
                f"data.path: {d.path!r} gives no usable training pairs ({report.skipped} bad records)"
            )
        log(
            f"[data] {d.path}: {len(pairs)} training pairs ({len(report.pairs) - len(pairs)} held-out positions left out)"
        )
        return pairs

    def train_stream(self, file_pairs: Sequence[Pair] | None) -> Callable[[int], Pair]:
        d = self.data
        if file_pairs is None:
            return GameStream(d.seed, d.min_plies, d.max_plies, d.natural)
        return file_stream(file_pairs, d.seed)

    def scorer(self) -> Scorer:
        return build_scorer(self.reward)
