"""The files the `text` task reads its rows from: JSONL, Parquet (verl's data files) and a Hugging
Face `datasets` dataset saved with `save_to_disk` (a directory).

    task.path: train.jsonl             # one JSON object per line
    task.path: train.parquet           # needs pyarrow; verl's rows (prompt, reward_model.ground_truth, ...)
    task.path: data/gsm8k/train        # a directory from Dataset.save_to_disk; needs `datasets`

Every format gives the same rows (`trainer.data.text_rows`): a prompt (text, or a list of chat
messages), an optional target (or `reward_model.ground_truth`), and the row's other keys as fields.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from trainer.data.pairs import DataFileError
from trainer.data.text_rows import TextRow, load_text_rows, rows_of_records


def _module(name: str, path: str, package: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise DataFileError(f"{path}: reading it needs {package} (pip install {package})") from None


def load_rows(path: str, prompt_key: str = "prompt", target_key: str = "target") -> list[TextRow]:
    """The rows of `path` (by its form: a directory, a .parquet file, else JSONL); DataFileError
    naming the file and the first bad row, or the package a format needs."""
    records = table_records(path)
    if records is not None:
        return rows_of_records(records, path, prompt_key, target_key)
    return load_text_rows(path, prompt_key, target_key)


def table_records(path: str) -> list[dict[str, Any]] | None:
    """The records of a dataset directory or a .parquet file; None for any other path (JSONL)."""
    where = Path(path).expanduser()
    if where.is_dir():
        datasets = _module("datasets", path, "datasets")
        try:
            data = datasets.load_from_disk(str(where))
        except Exception as exc:
            raise DataFileError(
                f"{path}: not a dataset saved with save_to_disk ({type(exc).__name__}: {exc})"
            ) from None
        if isinstance(data, datasets.DatasetDict):
            splits = ", ".join(data)
            raise DataFileError(
                f"{path}: holds the splits {splits}; point the key at one split (e.g. {path}/train)"
            )
        return data.to_list()
    if where.suffix == ".parquet":
        parquet = _module("pyarrow.parquet", path, "pyarrow")
        try:
            return parquet.read_table(str(where)).to_pylist()
        except Exception as exc:
            raise DataFileError(f"{path}: cannot read it as Parquet ({type(exc).__name__}: {exc})") from None
    return None
