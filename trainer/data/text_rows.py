"""JSONL rows of the generic `text` task: a prompt, an optional target, and the row's other fields.

    {"prompt": "12+30=", "target": "42", "a": 12, "b": 30}

The prompt and target keys are configurable. Every key of a row is a field a user reward may take
by name, and so is `prompt` (the prompt as the row gives it, whatever its key); `completion` and
`target` are the reward's own arguments, so a row key with one of those names is not a field. A file
is loaded whole or refused: its first bad row is reported as "file:line: reason" with the count of
the others.

verl's rows are read too: a prompt may be a list of chat messages (`[{"role": "user", "content":
...}]`; the policy is given the text of the last user message, the `prompt` field keeps the list),
and a row without the target key takes `reward_model.ground_truth` as its target.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from trainer.data.pairs import DataFileError, RecordErrors, jsonl_record, read_lines

RESERVED_FIELDS = ("completion", "target")
PROMPT_FIELD = "prompt"


class TextRow(NamedTuple):
    prompt: str
    target: str | None  # None: the row has no target key (or null)
    fields: dict[str, Any]  # the row's keys (reserved names left out) and "prompt"
    where: str  # "file:line", for messages


def _row(record: dict[str, Any], prompt_key: str, target_key: str, where: str) -> TextRow | str:
    """The row of one JSON object, or the reason it cannot be one."""
    if prompt_key not in record:
        return f"missing {prompt_key!r} (task.prompt_key)"
    given, target = record[prompt_key], record.get(target_key)
    prompt = last_user_message(given) if isinstance(given, list) else given
    if isinstance(given, list) and prompt is None:
        return f"{prompt_key!r}: a list of chat messages needs a user message with text content"
    if not isinstance(prompt, str):
        return f"{prompt_key!r} must be a string, got {type(prompt).__name__}"
    reward_model = record.get("reward_model")
    if target is None and target_key not in record and isinstance(reward_model, dict):
        target = reward_model.get("ground_truth")  # verl's rows
    if target is not None and not isinstance(target, str):
        return f"{target_key!r} must be a string or null, got {type(target).__name__}"
    fields = {k: v for k, v in record.items() if k not in RESERVED_FIELDS}
    fields[PROMPT_FIELD] = given
    return TextRow(prompt, target, fields, where)


def last_user_message(messages: list[Any]) -> str | None:
    """The text of the last `{"role": "user", "content": str}` of a chat, or None."""
    for message in reversed(messages):
        if (
            isinstance(message, dict)
            and message.get("role") == "user"
            and isinstance(message.get("content"), str)
        ):
            return message["content"]
    return None


def rows_of_records(
    records: Sequence[dict[str, Any]], path: str, prompt_key: str = "prompt", target_key: str = "target"
) -> list[TextRow]:
    """The rows of records read from a table (`path` names it in messages, "path:row N");
    DataFileError naming the first bad row."""
    numbered = enumerate(records, start=1)
    return collect_rows(path, ((n, _row(r, prompt_key, target_key, f"{path}:{n}")) for n, r in numbered))


def load_text_rows(path: str | Path, prompt_key: str = "prompt", target_key: str = "target") -> list[TextRow]:
    """Every row of a JSONL file (blank lines skipped); DataFileError naming the first bad row."""
    return collect_rows(path, parsed_jsonl(path, lambda r, where: _row(r, prompt_key, target_key, where)))


def parsed_jsonl(
    path: str | Path, parse: Callable[[Any, str], TextRow | str]
) -> Iterator[tuple[int, TextRow | str]]:
    """(line number, `parse(record, "path:N")` or the line's own problem) per non-blank JSONL line."""
    for number, raw in enumerate(read_lines(path), start=1):
        record = jsonl_record(raw)
        if record is not None:
            yield number, record if isinstance(record, str) else parse(record, f"{path}:{number}")


def collect_rows(path: str | Path, numbered: Iterable[tuple[int, TextRow | str]]) -> list[TextRow]:
    """The rows of (number, row or problem) pairs; DataFileError naming the first bad row (and how
    many more), or that the file holds none."""
    errors, rows = RecordErrors(path, strict=False), []
    for number, row in numbered:
        if isinstance(row, str):
            errors.add(number, row)
        else:
            rows.append(row)
    if errors.count:
        more = f" (and {errors.count - 1} more bad rows)" if errors.count > 1 else ""
        raise DataFileError(errors.messages[0] + more)
    if not rows:
        raise DataFileError(f"{path}: holds no rows")
    return rows


def split_held_out(rows: Sequence[TextRow], size: int, seed: int) -> tuple[list[TextRow], list[TextRow]]:
    """(training rows, held-out rows): `size` distinct prompts drawn by a seeded shuffle are held
    out, one row each, and every row with one of those prompts leaves the training set."""
    prompts = list(dict.fromkeys(r.prompt for r in rows))
    if size >= len(prompts):
        raise ValueError(
            f"{size} held-out prompts would leave no training rows ({len(prompts)} distinct prompts)"
        )
    random.Random(f"held-out:{seed}").shuffle(prompts)
    held = set(prompts[:size])
    first: dict[str, TextRow] = {}
    for r in rows:
        if r.prompt in held:
            first.setdefault(r.prompt, r)
    return [r for r in rows if r.prompt not in held], [first[p] for p in prompts[:size]]


def without_prompts(rows: Sequence[TextRow], prompts: set[str]) -> list[TextRow]:
    """The rows whose prompt is not in `prompts` (training rows never hold a held-out prompt)."""
    return [r for r in rows if r.prompt not in prompts]


__all__ = ["DataFileError", "TextRow", "load_text_rows", "split_held_out", "without_prompts"]
