"""The FEN task: a SAN move list from the standard start -> the FEN of the resulting position.

    task: {name: fen, min_plies: 1, max_plies: 4, similarity_weight: 0.5}
    task: {name: fen, source: pgn, path: games.pgn}

Training pairs are generated games (`task.min_plies`..`max_plies`, `task.natural`) or a PGN / JSONL
file (`task.source`, `task.path`; its targets in python-chess's spelling); the held-out set comes
from the same source, from positions training never sees, with training's mix of game lengths, and
its figures are reported by length (`by_plies`); the reward is FEN validity + Levenshtein
similarity + exact match, weighted by `task.validity_weight`, `similarity_weight` and `exact_weight`
(`rewards.FenScorer`; at the defaults, `rewards.score`), plus any user rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, model_validator

from rewards import FenRewardConfig, FenScorer, RewardConfig, Scorer
from service.preflight.data import FitLimits, check_generated_games, check_records
from service.tasks.base import RunSections, Task, check_reward_fields
from service.tasks.games import GamesConfig
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

FILE_SOURCES = {"pgn": "pgn", "jsonl": "jsonl", "json": "jsonl"}  # task.source by the file's extension


class FenTaskConfig(FenRewardConfig, GamesConfig):
    """`name: fen`: a SAN move list -> the FEN of the position, from generated games or a file; the
    reward's weights (`rewards.FenRewardConfig`) are keys of this section."""

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

    def data_files(self) -> tuple[str, ...]:
        return (self.path,) if self.path else ()


@dataclass(frozen=True)
class FenTask(Task):
    config_class = FenTaskConfig

    data: DataConfig
    reward: RewardConfig
    section: FenTaskConfig = FenTaskConfig()  # where the pairs come from, the reward's weights
    limits: FitLimits | None = None  # what every record must fit (checked in the driver)

    @classmethod
    def from_config(cls, cfg: RunSections) -> FenTask:
        """The task; refuses a user reward that does not resolve or takes more than completion and
        target, and generated games whose longest prompt cannot fit."""
        task = cls(data=cfg.data, reward=cfg.reward, section=cfg.task, limits=FitLimits.of(cfg))
        check_reward_fields(
            task.scorer(),
            lambda name: None if name == "target" else "the fen task's items (completion and target only)",
        )
        check_generated_games(cfg.task.max_plies, task.limits)
        return task

    @property
    def alphabet(self) -> str:
        return CHESS_ALPHABET

    @property
    def eval_group(self):
        """Held-out figures by game length: `by_plies` in each evaluation record."""
        return ("plies", lambda prompt: str(plies_of(prompt)))

    def eval_pairs(self) -> list[Pair]:
        d, g = self.data, self.section
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
        d = self.section
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
        d = self.section
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
        d, g = self.data, self.section
        if file_pairs is None:
            return GameStream(d.seed, g.min_plies, g.max_plies, g.natural)
        return file_stream(file_pairs, d.seed)

    def scorer(self) -> Scorer:
        return FenScorer(self.reward, self.section)
