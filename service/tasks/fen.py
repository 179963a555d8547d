"""The FEN task: a SAN move list from the standard start -> the FEN of the resulting position.

Training pairs are generated games (`task.min_plies`..`max_plies`, `task.natural`) or a PGN / JSONL
file (`task.source`, `task.path`; its targets in python-chess's
spelling); the held-out set comes from the same source, from positions training never sees, with
training's mix of game lengths, and its figures are reported by length (`by_plies`); the reward is
FEN validity + Levenshtein similarity + exact match (`rewards.score`), plus any user rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from rewards import RewardConfig, Scorer, build_scorer
from service.preflight.data import FitLimits, check_generated_games, check_records
from service.task_config import FenTaskConfig
from service.tasks.base import Task, check_reward_fields
from trainer.config import DataConfig
from trainer.data.chess_games import (
    CHESS_ALPHABET,
    GameStream,
    canonical_fen,
    eval_pairs,
    eval_pairs_from,
    is_held_out,
    load_pgn,
)
from trainer.data.held_out import plies_of
from trainer.data.pairs import DataFileError, LoadReport, Pair, file_stream, load_jsonl

if TYPE_CHECKING:
    from service.config import ServiceConfig


@dataclass(frozen=True)
class FenTask(Task):
    name = "fen"
    data: DataConfig
    reward: RewardConfig
    games: FenTaskConfig = FenTaskConfig()  # where the pairs come from: generated games or a file
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
        check_generated_games(cfg.task.max_plies, limits)
        return cls(data=cfg.data, reward=cfg.reward, games=cfg.task, limits=limits)

    @property
    def alphabet(self) -> str:
        return CHESS_ALPHABET

    @property
    def eval_group(self):
        """Held-out figures by game length: `by_plies` in each evaluation record."""
        return ("plies", lambda prompt: str(plies_of(prompt)))

    def eval_pairs(self) -> list[Pair]:
        d, g = self.data, self.games
        if g.source == "generated":
            pairs = eval_pairs(d.eval_size, d.eval_seed, g.min_plies, g.max_plies, g.natural)
        else:
            try:
                pairs = eval_pairs_from(self._file.pairs, d.eval_size, d.eval_seed)
            except ValueError as exc:
                raise ValueError(f"{g.path}: {exc}") from None
        if self.limits is not None:  # the held-out positions must fit as the training ones do
            located = ((f"held-out position {i}", p.prompt, p.target) for i, p in enumerate(pairs))
            check_records(
                "model.block_size", located, self.limits, CHESS_ALPHABET, train=g.source == "generated"
            )
        return pairs

    def __getstate__(self) -> dict:
        """Pickled (to the workers) without the file's pairs: those travel once, by the object store."""
        state = dict(self.__dict__)
        state.pop("_file", None)
        return state

    @cached_property
    def _file(self) -> LoadReport:
        """The data file's pairs, targets canonicalised; a target python-chess cannot read is a bad record."""
        d = self.games
        try:
            report = load_pgn(d.path, d.min_plies, d.max_plies) if d.source == "pgn" else load_jsonl(d.path)
        except DataFileError as exc:  # the file cannot be read at all
            raise ValueError(f"task.path: {exc}") from None
        pairs, where, errors = [], [], list(report.errors)
        for w, pair in zip(report.where or [""] * len(report.pairs), report.pairs, strict=True):
            try:
                pairs.append(Pair(pair.prompt, canonical_fen(pair.target)))
                where.append(w)
            except ValueError as exc:
                errors.append(
                    f"{w or d.path}: target {pair.target[:60]!r} is not a FEN python-chess reads ({exc})"
                )
        skipped = report.skipped + len(report.pairs) - len(pairs)
        if not pairs:  # said before the held-out split, which would otherwise blame eval_size
            first = f"; first: {errors[0]}" if errors else ""
            raise ValueError(f"task.path: {d.path!r} gives no usable pairs ({skipped} bad records{first})")
        return LoadReport(pairs, skipped, errors, tuple(where))

    def training_pairs(self, log: Callable[[str], None]) -> list[Pair] | None:
        d = self.games
        if d.source == "generated":
            return None
        report = self._file
        kept = [(w, p) for w, p in zip(report.where, report.pairs, strict=True) if not is_held_out(p.target)]
        if self.limits is not None:
            located = ((w, p.prompt, p.target) for w, p in kept)
            check_records("task.path", located, self.limits, CHESS_ALPHABET, train=True)
        pairs = [p for _, p in kept]
        if report.skipped:
            log(f"[data] {d.path}: skipped {report.skipped} bad records; first: {report.errors[0]}")
        if not pairs:
            raise ValueError(
                f"task.path: {d.path!r} gives no usable training pairs ({report.skipped} bad records)"
            )
        log(
            f"[data] {d.path}: {len(pairs)} training pairs ({len(report.pairs) - len(pairs)} held-out positions left out)"
        )
        return pairs

    def train_stream(self, file_pairs: Sequence[Pair] | None) -> Callable[[int], Pair]:
        d, g = self.data, self.games
        if file_pairs is None:
            return GameStream(d.seed, g.min_plies, g.max_plies, g.natural)
        return file_stream(file_pairs, d.seed)

    def scorer(self) -> Scorer:
        return build_scorer(self.reward)
