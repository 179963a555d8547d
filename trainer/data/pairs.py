"""Text pairs, the unit every task trains on, and the generic file loaders and streams.

A task gives (prompt, target) text; the policy's tokenizer turns it into ids. Loaders never stop
at a bad record: it is skipped and reported as "file:line: reason" (strict loading raises at the
first one instead).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

MAX_ERRORS_KEPT = 1000


class Pair(NamedTuple):
    prompt: str  # what the policy is given
    target: str  # what a perfect completion would be (the scorer's reference)


class FieldPair(NamedTuple):
    """A pair that also carries the data fields its rewards take by name (the `text` task's rows).

    The trainer reads `.prompt`, `.target` and `.fields` of whatever pairs a task gives it, so
    these travel wherever a `Pair` does; a `Pair` has no fields.
    """

    prompt: str
    target: str | None  # None: the row has no target (it can be used by GRPO, not by SFT)
    fields: dict[str, Any]  # name -> value: what the rewards take besides completion and target


class EpisodePair(NamedTuple):
    """A row of an environment task: its first observation, the row handed to reset, and a
    demonstration (each turn's action with the stop string that ends it, and the answer)."""

    prompt: str  # the environment's first observation
    target: str | None  # the demonstration as text (None: no demonstration; GRPO only)
    fields: dict[str, Any]  # the row
    turns: tuple[tuple[str, str], ...] | None = None  # (action + stop, observation) per turn


def repeat_fields(pairs: Sequence[Any], k: int) -> list[Any] | None:
    """Each pair's data fields repeated for its k completions; None when no pair carries any."""
    fields = [getattr(p, "fields", None) for p in pairs]
    if all(f is None for f in fields):
        return None
    return [f for f in fields for _ in range(k)]


# The row field that carries a completion's sampled token ids to the rewards that take them (TRL's
# `completion_ids`; `rewards.styles.TOKEN_IDS` names the same field on the rewards' side).
TOKEN_IDS_FIELD = "completion_ids"


def row_fields(
    pairs: Sequence[Any], k: int, token_ids: Sequence[list[int]] | None = None
) -> list[Any] | None:
    """What the rewards get as each row's fields: its pair's data fields (`repeat_fields`), and with
    token_ids (one list per row, rows pair after pair) each row's own ids under TOKEN_IDS_FIELD."""
    fields = repeat_fields(pairs, k)
    if token_ids is None:
        return fields
    return [
        {**(f or {}), TOKEN_IDS_FIELD: ids}
        for f, ids in zip(fields or [None] * len(token_ids), token_ids, strict=True)
    ]


class LoadReport(NamedTuple):
    pairs: list[Pair]
    skipped: int  # malformed games (PGN) or bad lines (JSONL)
    errors: list[str]  # "file:line: reason", the first MAX_ERRORS_KEPT of them
    where: tuple[str, ...] = ()  # "file:line" of each pair, for messages about a record


class DataFileError(ValueError):
    """A data file that cannot be read, or (strict loading) its first bad record."""


class RecordErrors:
    """Bad records of one file: counted, kept as "file:line: reason", raised at once if strict."""

    def __init__(self, path: str | Path, strict: bool):
        self.path, self.strict, self.count, self.messages = str(path), strict, 0, []

    def add(self, line: int, reason: str) -> None:
        message = f"{self.path}:{line}: {reason}"
        if self.strict:
            raise DataFileError(message)
        self.count += 1
        if len(self.messages) < MAX_ERRORS_KEPT:
            self.messages.append(message)


def jsonl_record(raw: bytes, expected: str = "a JSON object") -> dict[str, Any] | str | None:
    """The JSON object on one line, None for a blank line, or the reason the line is bad."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 ({exc.reason} at byte {exc.start})"
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"invalid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(record, dict):
        return f"expected {expected}, got {type(record).__name__}"
    return record


def read_lines(path: str | Path) -> list[bytes]:
    """The raw lines of a data file (DataFileError when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read().split(b"\n")
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _jsonl_pair(raw: bytes) -> Pair | str | None:
    """The pair on one line, None for a blank line, or the reason the line is bad."""
    record = jsonl_record(raw, "an object with 'prompt' and 'target'")
    if not isinstance(record, dict):
        return record
    for key in ("prompt", "target"):
        if key not in record:
            return f"missing {key!r}"
        if not isinstance(record[key], str):
            return f"{key!r} must be a string, got {type(record[key]).__name__}"
    return Pair(record["prompt"], record["target"])


def load_jsonl(path: str | Path, strict: bool = False) -> LoadReport:
    """Pairs from lines `{"prompt": str, "target": str}` (other keys ignored, blank lines skipped).

    A bad line is skipped and reported as "file:line: reason"; strict=True raises DataFileError
    at the first one.
    """
    errors, pairs, where = RecordErrors(path, strict), [], []
    for number, raw in enumerate(read_lines(path), start=1):
        result = _jsonl_pair(raw)
        if isinstance(result, str):
            errors.add(number, result)
        elif result is not None:
            pairs.append(result)
            where.append(f"{path}:{number}")
    return LoadReport(pairs, errors.count, errors.messages, tuple(where))


def file_stream(pairs: Sequence[Pair], seed: int) -> Callable[[int], Pair]:
    """Pair number i of an endless stream over loaded pairs: one seeded shuffle per epoch."""
    if not pairs:
        raise ValueError("the training data file holds no usable pairs")
    orders: dict[int, list[int]] = {}

    def at(index: int) -> Pair:
        epoch, offset = divmod(index, len(pairs))
        if epoch not in orders:
            order = list(range(len(pairs)))
            random.Random(f"epoch:{seed}:{epoch}").shuffle(order)
            orders.clear()  # one epoch at a time is enough for a forward-moving stream
            orders[epoch] = order
        return pairs[orders[epoch][offset]]

    return at
