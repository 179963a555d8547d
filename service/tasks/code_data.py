"""The `code` task's rows: JSONL in the shapes code data sets use, or generated integer-function problems.

    {"prompt": "...", "target": "def f(x): ...", "test_list": ["assert f(1) == 2"], "test_setup": ""}
    {"prompt": "def add(a, b):\\n", "test": "def check(candidate): ...", "entry_point": "add"}
    {"prompt": "...", "tests": [{"input": "1 2\\n", "output": "3\\n"}]}

A row holds a prompt, an optional target (the SFT answer) and exactly one of the three test shapes
(MBPP's `test_setup_code` is read as `test_setup`). A file is loaded whole or refused: its first
bad row as "file:line: reason", with the count of the others.

The bundled problems (`generated_rows`): two or three examples of an integer function (`x+3`, `x*2`,
`x%5`, `x//4`, ...) in the prompt, the answer a one-line `f=lambda x:...` checked by assert lines on
inputs the prompt does not show. Examples are drawn until no other function of the family fits
them, so each problem has one answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.data.text_rows import TextRow, collect_rows, parsed_jsonl

SHAPES = (
    "test_list (assert lines), test with entry_point (check(candidate)), or tests ({input, output} pairs)"
)


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)


def _io_pairs(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(c, dict) and isinstance(c.get("input"), str) and isinstance(c.get("output"), str)
            for c in value
        )
    )


def test_fields(record: dict[str, Any]) -> dict[str, Any] | str:
    """The row's tests as item fields, or the reason the row has none it can use."""
    shapes = [k for k in ("test_list", "test", "tests") if record.get(k) is not None]
    if len(shapes) != 1:
        given = f"holds {' and '.join(shapes)}" if shapes else "has none"
        return f"a code row needs exactly one of {SHAPES}; it {given}"
    shape = shapes[0]
    if shape == "test_list":
        setup = record.get("test_setup", record.get("test_setup_code")) or ""
        if not _str_list(record["test_list"]):
            return "'test_list' must be a non-empty list of assert lines (strings)"
        if not isinstance(setup, str):
            return f"'test_setup' must be a string, got {type(setup).__name__}"
        return {"test_list": record["test_list"], **({"test_setup": setup} if setup else {})}
    if shape == "test":
        entry = record.get("entry_point")
        if not isinstance(record["test"], str) or not record["test"].strip():
            return "'test' must be a non-empty string defining check(candidate)"
        if not isinstance(entry, str) or not entry.isidentifier():
            return f"'test' needs 'entry_point', the name of the function it checks; got {entry!r}"
        return {"test": record["test"], "entry_point": entry}
    if not _io_pairs(record["tests"]):
        return '\'tests\' must be a non-empty list of {"input": str, "output": str}'
    return {"tests": [{"input": c["input"], "output": c["output"]} for c in record["tests"]]}


def _row(record: dict[str, Any], prompt_key: str, target_key: str, where: str) -> TextRow | str:
    prompt, target = record.get(prompt_key), record.get(target_key)
    if not isinstance(prompt, str):
        return f"{prompt_key!r} (task.prompt_key) must be a string, got {type(prompt).__name__}"
    if target is not None and not isinstance(target, str):
        return f"{target_key!r} (task.target_key) must be a string or null, got {type(target).__name__}"
    fields = test_fields(record)
    if isinstance(fields, str):
        return fields
    if "entry_point" in fields:
        fields["prompt"] = prompt  # a HumanEval body continues the prompt
    return TextRow(prompt, target, fields, where)


def load_code_rows(path: str | Path, prompt_key: str = "prompt", target_key: str = "target") -> list[TextRow]:
    """Every row of a JSONL file of code problems; DataFileError naming the first bad row."""
    return collect_rows(path, parsed_jsonl(path, lambda r, where: _row(r, prompt_key, target_key, where)))


# ---------------------------------------------------------------- the bundled problems
INPUTS = range(0, 20)  # the x of examples and tests
EXAMPLES = (2, 3)  # examples shown in a prompt
CHECKS = 4  # assert lines on inputs the prompt does not show


def _family() -> dict[str, Callable[[int], int]]:
    ops: dict[str, Callable[[int], int]] = {}
    for k in range(1, 10):
        ops[f"x+{k}"] = lambda x, k=k: x + k
        ops[f"x-{k}"] = lambda x, k=k: x - k
    for k in range(2, 10):
        ops[f"x*{k}"] = lambda x, k=k: x * k
        ops[f"x%{k}"] = lambda x, k=k: x % k
        ops[f"x//{k}"] = lambda x, k=k: x // k
    return ops


FAMILY = _family()


def problem(rng: random.Random) -> dict[str, Any]:
    """One problem as a JSONL row: prompt, target and test_list (the answer's `expr` as a field)."""
    names = sorted(FAMILY)
    while True:
        expr = rng.choice(names)
        fn = FAMILY[expr]
        xs = rng.sample(INPUTS, EXAMPLES[1] + CHECKS)
        shown = xs[: rng.choice(EXAMPLES)]
        fits = [n for n in names if all(FAMILY[n](x) == fn(x) for x in shown)]
        if fits == [expr]:
            break
    prompt = " ".join(f"f({x})={fn(x)}" for x in shown) + "\n"
    checks = [f"assert f({x})=={fn(x)}" for x in xs[EXAMPLES[1] :]]
    return {"prompt": prompt, "target": f"f=lambda x:{expr}", "test_list": checks, "expr": expr}


def generated_rows(
    seed: int, n: int, exclude: set[str] = frozenset(), label: str = "generated"
) -> list[TextRow]:
    """`n` problems of distinct prompts, none in `exclude`; deterministic in the arguments."""
    rng = random.Random(f"code-problems:{seed}")
    rows: list[TextRow] = []
    seen = set(exclude)
    tries = 0
    while len(rows) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise ValueError(f"the generator found only {len(rows)} distinct problems of the {n} asked for")
        record = problem(rng)
        if record["prompt"] in seen:
            continue
        seen.add(record["prompt"])
        fields = test_fields(record)
        assert isinstance(fields, dict)
        rows.append(TextRow(record["prompt"], record["target"], fields, f"{label} problem {len(rows)}"))
    return rows
