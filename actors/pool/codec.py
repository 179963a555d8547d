"""Compact, exact encoding of a list of `ScoreResult`s for the trip from a reward worker to the pool.

A list of dataclasses pickles object by object; columns of numbers pickle as a few buffers. A
chunk's results become `EncodedResults`: totals and status codes as arrays, components as a
value matrix with a presence mask (absent components stay absent), reasons and infos only
where set, with what the rewards logged during the call. `decode` gives back results equal to
the encoded ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewards import ScoreResult
from rewards.reward_log import LOG_EXTRA
from rewards.user_reward import is_reported


@dataclass(frozen=True)
class EncodedResults:
    """Results of n items in columns."""

    totals: np.ndarray  # [n] float64
    status_names: tuple[str, ...]  # distinct statuses, indexed by status_codes
    status_codes: np.ndarray  # [n] uint8
    component_names: tuple[str, ...]  # [C]
    components: np.ndarray  # [n, C] float64; meaningful where present
    present: np.ndarray  # [n, C] bool: item i has component j
    reasons: dict[int, str] = field(default_factory=dict)  # item index -> reason, only where not None
    infos: dict[int, dict] = field(default_factory=dict)  # item index -> info, only where not None
    # The components the scorer names as its own (`Scorer.component_names`), whose means a step
    # reports; others a result carries (the code task's `sandbox_<status>` flags) are not averaged.
    reported: tuple[str, ...] = ()
    # What the call's rewards logged with log_metric (set by the worker, not by `encode`): name -> (sum, count)
    logged: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.totals.shape[0])

    def statuses(self) -> list[str]:
        """[n] status per item."""
        names = self.status_names
        return [names[c] for c in self.status_codes.tolist()]

    def values(self) -> list[float]:
        """[n] total per item."""
        return self.totals.tolist()

    def count_status(self, status: str) -> int:
        """Items with `status`."""
        if status not in self.status_names:
            return 0
        return int((self.status_codes == self.status_names.index(status)).sum())


def encode(results: Sequence[ScoreResult], reported: Sequence[str] = ()) -> EncodedResults:
    """Columns of `results`; at most 256 distinct statuses per chunk. reported: see EncodedResults."""
    n = len(results)
    statuses = [r.status for r in results]
    status_names = tuple(dict.fromkeys(statuses))
    if len(status_names) > 256:
        raise ValueError("a chunk may carry at most 256 distinct statuses")
    code_of = {s: i for i, s in enumerate(status_names)}
    # Results with the same component names (nearly all of a chunk) are written as one block.
    comps = [r.components for r in results]
    rows_by_keys: dict[tuple[str, ...], list[int]] = {}
    for i, d in enumerate(comps):
        rows_by_keys.setdefault(tuple(d), []).append(i)
    column_of: dict[str, int] = {}
    for keys in rows_by_keys:
        for k in keys:
            column_of.setdefault(k, len(column_of))
    components = np.zeros((n, len(column_of)), dtype=np.float64)
    present = np.zeros((n, len(column_of)), dtype=bool)
    for keys, rows in rows_by_keys.items():
        if keys:
            cells = np.ix_(rows, [column_of[k] for k in keys])
            components[cells] = [list(comps[i].values()) for i in rows]
            present[cells] = True
    return EncodedResults(
        totals=np.array([r.total for r in results], dtype=np.float64),
        status_names=status_names,
        status_codes=np.array([code_of[s] for s in statuses], dtype=np.uint8),
        component_names=tuple(column_of),
        components=components,
        present=present,
        reasons={i: r.reason for i, r in enumerate(results) if r.reason is not None},
        infos={i: r.info for i, r in enumerate(results) if r.info is not None},
        reported=tuple(reported),
    )


def decode(enc: EncodedResults) -> list[ScoreResult]:
    """The `ScoreResult`s that `enc` was encoded from, in order."""
    names = enc.component_names
    statuses = enc.statuses()
    totals = enc.values()
    values = enc.components.tolist()
    present = enc.present.tolist()
    out = []
    for i in range(len(enc)):
        comps = {names[j]: values[i][j] for j, has in enumerate(present[i]) if has}
        out.append(ScoreResult(totals[i], comps, statuses[i], enc.reasons.get(i), enc.infos.get(i)))
    return out


def failed_block(n: int, status: str, reason: str) -> EncodedResults:
    """n items that all failed with `status` and `reason` (total 0, no components)."""
    return encode([ScoreResult.failed(status, reason)] * n)


def reported_components(scorer: object) -> tuple[str, ...]:
    """The components a scorer names as its own; none for one that names none (an environment host)."""
    return tuple(getattr(scorer, "component_names", ()))


def component_sums(blocks: Sequence[EncodedResults]) -> dict[str, tuple[float, float]]:
    """(sum, count) of each reported component (and each part a reported user reward carried,
    `rewards.user_reward.is_reported`) over the items of `blocks` that have it; a reported
    component no item had is (0, 0). Blocks that failed whole report none."""
    out: dict[str, tuple[float, float]] = {}
    for block in blocks:
        for name in block.reported:
            out.setdefault(name, (0.0, 0.0))
        for j, name in enumerate(block.component_names):
            if is_reported(name, block.reported):
                total, count = out.get(name, (0.0, 0.0))
                has = block.present[:, j]
                out[name] = (total + float(block.components[has, j].sum()), count + float(has.sum()))
    return out


def logged_extras(results: Sequence[ScoreResult]) -> dict[int, dict[str, Any]]:
    """Item index -> what TRL-style rewards logged for it with `log_extra` (`rewards.reward_log.LOG_EXTRA`
    in its result's info), for the items that have some."""
    return {i: r.info[LOG_EXTRA] for i, r in enumerate(results) if r.info and LOG_EXTRA in r.info}


def block_extras(blocks: Sequence[EncodedResults]) -> dict[int, dict[str, Any]]:
    """`logged_extras` of blocks laid end to end (indices over every block's items, in order)."""
    out: dict[int, dict[str, Any]] = {}
    offset = 0
    for block in blocks:
        out.update({offset + i: info[LOG_EXTRA] for i, info in block.infos.items() if LOG_EXTRA in info})
        offset += len(block)
    return out
