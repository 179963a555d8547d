"""The result of scoring one completion, and the statuses it can carry.

A `ScoreResult` is small, frozen and picklable so that lists of them travel cheaply through
Ray's object store. `total` is meaningful for the scoring statuses (`ok`, `invalid`,
`unparsable`, `too_long`); `error`, `timeout`, `bad_input` and `skipped` mark a result that carries no
reward at all (its total is 0 only as a placeholder and must not be trained on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK = "ok"  # a valid FEN (python-chess status() == STATUS_VALID, six fields)
INVALID = "invalid"  # parses as a FEN but is not a valid position, or lacks fields
UNPARSABLE = "unparsable"  # python-chess refuses to parse it
TOO_LONG = "too_long"  # longer than max_chars after stripping; nothing else computed
BAD_INPUT = "bad_input"  # completion or target is not a str
ERROR = "error"  # a reward function raised or returned a non-finite / non-number value
TIMEOUT = "timeout"  # assigned by the reward pool when scoring did not finish in time
SKIPPED = "skipped"  # a user reward returned None: no reward; the trainer drops the item's group

STATUSES: tuple[str, ...] = (OK, INVALID, UNPARSABLE, TOO_LONG, BAD_INPUT, ERROR, TIMEOUT, SKIPPED)
# Statuses whose total is a real reward; the others mean "no reward for this item".
USABLE_STATUSES: frozenset[str] = frozenset({OK, INVALID, UNPARSABLE, TOO_LONG})


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """Score of one completion: weighted `total`, raw `components` by name, and a `status`."""

    total: float
    components: dict[str, float] = field(default_factory=dict)
    status: str = OK
    reason: str | None = None  # why, for error / bad_input / too_long / timeout
    info: dict[str, Any] | None = None  # what the item reports for the records (a reward's log_extra)

    @property
    def usable(self) -> bool:
        """True when `total` is a reward to train on (not an error, timeout or bad input)."""
        return self.status in USABLE_STATUSES

    @staticmethod
    def failed(status: str, reason: str | None = None) -> ScoreResult:
        """A result without reward: total 0, no components."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; allowed: {', '.join(STATUSES)}")
        return ScoreResult(total=0.0, components={}, status=status, reason=reason)
